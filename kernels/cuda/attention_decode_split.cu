// Split-K ("flash-decoding") paged attention for decode, --cuda_kernels=fused. One block per
// (kv head, sequence, split): its warps stride over the split's context positions and score
// each K row against all query heads of the kv head's GQA group (one read of K and V serves
// them all), keeping an online softmax per head; the warps merge in shared memory. With one
// split the block writes the output; otherwise it writes its partial (max, sum, unnormalised
// V accumulator) to a workspace and a combine kernel merges the splits of each row.
//
// The baseline set (attention_decode.cu) runs one block per (query head, sequence): at batch 1
// on `small` that is 12 blocks on a 132-SM H200, each reading its kv head's K and V again. Here
// the grid has num_kv_heads * num_seqs * splits blocks (kernel_plan.h: DecodeSplits), and the
// split count depends on shapes only, so a captured graph replays at any context length.
#include "absl/strings/str_cat.h"
#include "kernels/base/status_macros.h"
#include "kernels/cuda/attention_common.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/kernel_plan.h"
#include "kernels/cuda/ops.h"

namespace saturn::gpu {
namespace {

constexpr int kWarps = 4;

// NPL: head-dim elements per lane (head_dim <= 32 * NPL). G: query heads per kv head.
template <typename T, int NPL>
__global__ void __launch_bounds__(kWarps * 32)
    AttentionDecodeSplitKernel(const T* __restrict__ q, const T* __restrict__ k_cache,
                               const T* __restrict__ v_cache, T* __restrict__ out,
                               float* __restrict__ ws, PagedAttentionArgs a, int splits) {
  __shared__ float s_m[kWarps][kSplitMaxGroup], s_l[kWarps][kSplitMaxGroup];
  __shared__ float s_acc[kWarps][kSplitMaxGroup][32 * NPL];
  const int kvh = blockIdx.x, s = blockIdx.y, split = blockIdx.z;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int hd = a.head_dim, group = a.num_heads / a.num_kv_heads;
  const int row = a.query_start[s];
  const int qlen = a.query_start[s + 1] - row;
  if (qlen <= 0) return;  // the combine kernel skips such rows too
  const int64_t qrow = row + qlen - 1;
  const int ctx = min(a.context_lens[s], a.max_blocks_per_seq * a.block_size);
  // DecodeSplitRange (kernel_plan.h), inline.
  int chunk = (ctx + splits - 1) / splits;
  chunk = max(chunk, kSplitMinPositions);
  const int begin = min(ctx, split * chunk), end = min(ctx, begin + chunk);
  const int64_t kv_width = static_cast<int64_t>(a.num_kv_heads) * hd;
  const int32_t* table = a.block_tables + static_cast<int64_t>(s) * a.max_blocks_per_seq;

  float qv[kSplitMaxGroup][NPL], acc[kSplitMaxGroup][NPL], m[kSplitMaxGroup], l[kSplitMaxGroup];
#pragma unroll
  for (int g = 0; g < kSplitMaxGroup; ++g) {
    const T* qp = q + qrow * a.num_heads * hd + static_cast<int64_t>(kvh * group + g) * hd;
#pragma unroll
    for (int j = 0; j < NPL; ++j) {
      const int d = lane + 32 * j;
      qv[g][j] = g < group && d < hd ? Load(qp, d) * a.scale : 0.0f;
      acc[g][j] = 0.0f;
    }
    m[g] = -INFINITY;
    l[g] = 0.0f;
  }
  for (int pos = begin + warp; pos < end; pos += kWarps) {
    const int64_t slot =
        static_cast<int64_t>(table[pos / a.block_size]) * a.block_size + pos % a.block_size;
    const int64_t base = slot * kv_width + static_cast<int64_t>(kvh) * hd;
    float kv[NPL];
#pragma unroll
    for (int j = 0; j < NPL; ++j) {
      const int d = lane + 32 * j;
      kv[j] = d < hd ? Load(k_cache, base + d) : 0.0f;
    }
    float p[kSplitMaxGroup], corr[kSplitMaxGroup];
#pragma unroll
    for (int g = 0; g < kSplitMaxGroup; ++g) {
      if (g >= group) break;
      float dot = 0.0f;
#pragma unroll
      for (int j = 0; j < NPL; ++j) dot += qv[g][j] * kv[j];
      dot = WarpSum(dot);
      const float m_new = fmaxf(m[g], dot);
      corr[g] = __expf(m[g] - m_new);
      p[g] = __expf(dot - m_new);
      l[g] = l[g] * corr[g] + p[g];
      m[g] = m_new;
    }
#pragma unroll
    for (int j = 0; j < NPL; ++j) {
      const int d = lane + 32 * j;
      kv[j] = d < hd ? Load(v_cache, base + d) : 0.0f;
    }
#pragma unroll
    for (int g = 0; g < kSplitMaxGroup; ++g) {
      if (g >= group) break;
#pragma unroll
      for (int j = 0; j < NPL; ++j) acc[g][j] = acc[g][j] * corr[g] + p[g] * kv[j];
    }
  }
#pragma unroll
  for (int g = 0; g < kSplitMaxGroup; ++g) {
    if (g >= group) break;
    if (lane == 0) {
      s_m[warp][g] = m[g];
      s_l[warp][g] = l[g];
    }
#pragma unroll
    for (int j = 0; j < NPL; ++j) s_acc[warp][g][lane + 32 * j] = acc[g][j];
  }
  __syncthreads();
  // Merge the warps: thread t handles (head g, dim d) pairs.
  for (int e = threadIdx.x; e < group * hd; e += blockDim.x) {
    const int g = e / hd, d = e % hd;
    float gm = -INFINITY;
    for (int w = 0; w < kWarps; ++w) gm = fmaxf(gm, s_m[w][g]);
    float gl = 0.0f, o = 0.0f;
    if (gm != -INFINITY) {
      for (int w = 0; w < kWarps; ++w) {
        if (s_m[w][g] == -INFINITY) continue;
        const float f = __expf(s_m[w][g] - gm);
        gl += s_l[w][g] * f;
        o += s_acc[w][g][d] * f;
      }
    }
    const int h = kvh * group + g;
    if (splits == 1) {
      Store(out + qrow * a.num_heads * hd + static_cast<int64_t>(h) * hd, d,
            gl > 0.0f ? o / gl : 0.0f);
    } else {
      // Partial p = (s * num_heads + h) * splits + split: [m, l] then hd accumulators.
      const int64_t part = (static_cast<int64_t>(s) * a.num_heads + h) * splits + split;
      float* pp = ws + part * (hd + 2);
      if (d == 0) {
        pp[0] = gm;
        pp[1] = gl;
      }
      pp[2 + d] = o;
    }
  }
}

// One block per (query head, sequence): merges the splits' partials of its row.
template <typename T>
__global__ void AttentionCombineKernel(const float* __restrict__ ws, T* __restrict__ out,
                                       PagedAttentionArgs a, int splits) {
  const int h = blockIdx.x, s = blockIdx.y, hd = a.head_dim;
  const int row = a.query_start[s];
  const int qlen = a.query_start[s + 1] - row;
  if (qlen <= 0) return;
  const int64_t qrow = row + qlen - 1;
  const float* base = ws + (static_cast<int64_t>(s) * a.num_heads + h) * splits * (hd + 2);
  float gm = -INFINITY;
  for (int i = 0; i < splits; ++i) gm = fmaxf(gm, base[i * (hd + 2)]);
  T* op = out + qrow * a.num_heads * hd + static_cast<int64_t>(h) * hd;
  for (int d = threadIdx.x; d < hd; d += blockDim.x) {
    float gl = 0.0f, o = 0.0f;
    if (gm != -INFINITY) {
      for (int i = 0; i < splits; ++i) {
        const float* pp = base + i * (hd + 2);
        if (pp[0] == -INFINITY) continue;
        const float f = __expf(pp[0] - gm);
        gl += pp[1] * f;
        o += pp[2 + d] * f;
      }
    }
    Store(op, d, gl > 0.0f ? o / gl : 0.0f);
  }
}

template <typename T, int NPL>
absl::Status Launch(cudaStream_t st, const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                    const AttentionBatch& b, const AttentionShape& sh, const Tensor& out, float* ws,
                    int splits) {
  const PagedAttentionArgs a = MakePagedAttentionArgs(b, sh);
  const dim3 grid(sh.num_kv_heads, b.num_seqs, splits);
  AttentionDecodeSplitKernel<T, NPL><<<grid, kWarps * 32, 0, st>>>(
      q.as<T>(), k_cache.as<T>(), v_cache.as<T>(), out.as<T>(), ws, a, splits);
  CUDA_CHECK_LAUNCH("AttentionDecodeSplitKernel");
  RecordLaunch(KernelFamily::kAttentionDecode,
               reinterpret_cast<const void*>(&AttentionDecodeSplitKernel<T, NPL>),
               static_cast<int64_t>(sh.num_kv_heads) * b.num_seqs * splits, kWarps * 32, 0);
  if (splits == 1) return absl::OkStatus();
  const int threads = sh.head_dim <= 64 ? 64 : 128;
  const dim3 cgrid(sh.num_heads, b.num_seqs);
  AttentionCombineKernel<T><<<cgrid, threads, 0, st>>>(ws, out.as<T>(), a, splits);
  CUDA_CHECK_LAUNCH("AttentionCombineKernel");
  RecordLaunch(KernelFamily::kAttentionCombine,
               reinterpret_cast<const void*>(&AttentionCombineKernel<T>),
               static_cast<int64_t>(sh.num_heads) * b.num_seqs, threads, 0);
  return absl::OkStatus();
}

}  // namespace

bool AttentionDecodeSplitApplies(const AttentionShape& shape) {
  return shape.num_kv_heads > 0 && shape.num_heads % shape.num_kv_heads == 0 &&
         shape.num_heads / shape.num_kv_heads <= kSplitMaxGroup && shape.head_dim <= 256;
}

absl::Status AttentionDecodeSplit(cudaStream_t s, const Tensor& q, const Tensor& k_cache,
                                  const Tensor& v_cache, const AttentionBatch& batch,
                                  const AttentionShape& shape, const Tensor& out, float* workspace,
                                  int64_t workspace_floats, int splits) {
  RETURN_IF_ERROR(CheckAttentionDtypes(q, k_cache, v_cache, out));
  if (batch.num_seqs == 0) return absl::OkStatus();
  if (!AttentionDecodeSplitApplies(shape)) {
    return absl::InvalidArgumentError(
        absl::StrCat("attention (split): ", shape.num_heads, " heads over ", shape.num_kv_heads,
                     " kv heads is not a group of at most ", kSplitMaxGroup));
  }
  if (batch.num_seqs > 65535) {
    return absl::InvalidArgumentError("attention: more than 65535 sequences in one call");
  }
  const int64_t need =
      splits > 1 ? int64_t{batch.num_seqs} * shape.num_heads * splits * (shape.head_dim + 2) : 0;
  if (splits < 1 || splits > kSplitMaxSplits || (splits > 1 && workspace == nullptr) ||
      need > workspace_floats) {
    return absl::InvalidArgumentError(
        absl::StrCat("attention (split): ", splits, " splits (1..", kSplitMaxSplits, ") need ",
                     need, " workspace floats; ", workspace_floats, " given"));
  }
  SATURN_DISPATCH_FLOAT(q.dtype, "attention", return ByHeadDim(shape.head_dim, [&](auto npl) {
                          return Launch<scalar_t, decltype(npl)::value>(
                              s, q, k_cache, v_cache, batch, shape, out, workspace, splits);
                        }););
}

}  // namespace saturn::gpu
