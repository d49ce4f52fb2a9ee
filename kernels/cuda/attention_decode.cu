// Paged attention for decode: one query row per sequence, GQA, block tables. One block per
// (query head, sequence); its warps stride over the context positions, each keeping an online
// softmax (running max, running sum, weighted V accumulator in registers), merged across warps
// in shared memory at the end. The context length is read from device memory, and the launch
// shape depends only on num_seqs, num_heads and head_dim, so the kernel can be graph-captured
// and replayed for any context length up to the block table's capacity.
//
//   cache row of position p of sequence s = block_tables[s][p / block_size] * block_size
//                                           + p % block_size
//   K/V of kv head g in that row = cache[row, g*hd .. (g+1)*hd)
#include "absl/strings/str_cat.h"
#include "kernels/base/status_macros.h"
#include "kernels/cuda/attention_common.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/ops.h"

namespace saturn::gpu {
namespace {

constexpr int kWarps = 8;

// NPL: head-dim elements per lane (head_dim <= 32 * NPL).
template <typename T, int NPL>
__global__ void __launch_bounds__(kWarps * 32)
    AttentionDecodeKernel(const T* __restrict__ q, const T* __restrict__ k_cache,
                          const T* __restrict__ v_cache, T* __restrict__ out,
                          PagedAttentionArgs a) {
  __shared__ float s_m[kWarps], s_l[kWarps];
  __shared__ float s_acc[kWarps][32 * NPL];
  const int h = blockIdx.x, s = blockIdx.y;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int hd = a.head_dim;
  const int row = a.query_start[s];
  const int qlen = a.query_start[s + 1] - row;
  if (qlen <= 0) return;
  // A decode row is the last context position; with qlen > 1 only the last row is handled
  // (the backend routes such batches to the prefill kernel).
  const int64_t qrow = row + qlen - 1;
  const int ctx = min(a.context_lens[s], a.max_blocks_per_seq * a.block_size);
  const int kvh = h / (a.num_heads / a.num_kv_heads);
  const int64_t kv_width = static_cast<int64_t>(a.num_kv_heads) * hd;
  const int32_t* table = a.block_tables + static_cast<int64_t>(s) * a.max_blocks_per_seq;

  float qv[NPL], acc[NPL];
  const T* qp = q + qrow * a.num_heads * hd + static_cast<int64_t>(h) * hd;
#pragma unroll
  for (int j = 0; j < NPL; ++j) {
    const int d = lane + 32 * j;
    qv[j] = d < hd ? Load(qp, d) * a.scale : 0.0f;
    acc[j] = 0.0f;
  }
  float m = -INFINITY, l = 0.0f;
  for (int pos = warp; pos < ctx; pos += kWarps) {
    const int64_t slot =
        static_cast<int64_t>(table[pos / a.block_size]) * a.block_size + pos % a.block_size;
    const int64_t base = slot * kv_width + static_cast<int64_t>(kvh) * hd;
    float dot = 0.0f;
#pragma unroll
    for (int j = 0; j < NPL; ++j) {
      const int d = lane + 32 * j;
      if (d < hd) dot += qv[j] * Load(k_cache, base + d);
    }
    dot = WarpSum(dot);
    const float m_new = fmaxf(m, dot);
    const float corr = __expf(m - m_new);
    const float p = __expf(dot - m_new);
    l = l * corr + p;
#pragma unroll
    for (int j = 0; j < NPL; ++j) {
      const int d = lane + 32 * j;
      acc[j] = acc[j] * corr + (d < hd ? p * Load(v_cache, base + d) : 0.0f);
    }
    m = m_new;
  }
  if (lane == 0) {
    s_m[warp] = m;
    s_l[warp] = l;
  }
#pragma unroll
  for (int j = 0; j < NPL; ++j) s_acc[warp][lane + 32 * j] = acc[j];
  __syncthreads();
  float gm = -INFINITY;
  for (int w = 0; w < kWarps; ++w) gm = fmaxf(gm, s_m[w]);
  float gl = 0.0f;
  for (int w = 0; w < kWarps; ++w) gl += s_m[w] == -INFINITY ? 0.0f : s_l[w] * __expf(s_m[w] - gm);
  T* op = out + qrow * a.num_heads * hd + static_cast<int64_t>(h) * hd;
  for (int d = threadIdx.x; d < hd; d += blockDim.x) {
    float o = 0.0f;
    if (gl > 0.0f) {
      for (int w = 0; w < kWarps; ++w) {
        if (s_m[w] != -INFINITY) o += s_acc[w][d] * __expf(s_m[w] - gm);
      }
      o /= gl;
    }
    Store(op, d, o);
  }
}

template <typename T, int NPL>
absl::Status Launch(cudaStream_t s, const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                    const AttentionBatch& b, const AttentionShape& sh, const Tensor& out) {
  const PagedAttentionArgs a = MakePagedAttentionArgs(b, sh);
  const dim3 grid(sh.num_heads, b.num_seqs);
  AttentionDecodeKernel<T, NPL>
      <<<grid, kWarps * 32, 0, s>>>(q.as<T>(), k_cache.as<T>(), v_cache.as<T>(), out.as<T>(), a);
  CUDA_CHECK_LAUNCH("AttentionDecodeKernel");
  RecordLaunch(KernelFamily::kAttentionDecode,
               reinterpret_cast<const void*>(&AttentionDecodeKernel<T, NPL>),
               static_cast<int64_t>(sh.num_heads) * b.num_seqs, kWarps * 32, 0);
  return absl::OkStatus();
}

}  // namespace

absl::Status AttentionDecode(cudaStream_t s, const Tensor& q, const Tensor& k_cache,
                             const Tensor& v_cache, const AttentionBatch& batch,
                             const AttentionShape& shape, const Tensor& out) {
  RETURN_IF_ERROR(CheckAttentionDtypes(q, k_cache, v_cache, out));
  if (batch.num_seqs == 0) return absl::OkStatus();
  if (batch.num_seqs > 65535) {
    return absl::InvalidArgumentError("attention: more than 65535 sequences in one call");
  }
  SATURN_DISPATCH_FLOAT(q.dtype, "attention", return ByHeadDim(shape.head_dim, [&](auto npl) {
                          return Launch<scalar_t, decltype(npl)::value>(s, q, k_cache, v_cache,
                                                                        batch, shape, out);
                        }););
}

}  // namespace saturn::gpu
