// Paged attention for prefill and mixed chunks, FlashAttention-style: a block takes a tile of
// kRowsPerBlock query rows of one head of one sequence, streams the sequence's K/V through
// shared memory kKeysPerTile positions at a time (gathered through the block table), and keeps
// an online softmax per row in registers. Scores live in one register per lane and never reach
// global memory. Causal as in backend.h: row i of a chunk of length L attends to positions
// 0 .. context_len - L + i. The grid is (ceil(max_query_len / rows), heads, seqs); blocks past
// a sequence's chunk return at once.
//
//   warp w owns rows w*4 .. w*4+3 of the tile; lane j scores key kv0+j of the K tile;
//   lane j accumulates output dims j, j+32, ... (head_dim <= 32 * NPL)
#include "absl/strings/str_cat.h"
#include "kernels/base/status_macros.h"
#include "kernels/cuda/attention_common.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/ops.h"

namespace saturn::gpu {
namespace {

constexpr int kWarps = 4;
constexpr int kRowsPerWarp = 4;
constexpr int kRowsPerBlock = kWarps * kRowsPerWarp;
constexpr int kKeysPerTile = 32;

size_t SharedBytes(int hd) {
  return sizeof(float) *
         (static_cast<size_t>(kRowsPerBlock) * hd + static_cast<size_t>(kKeysPerTile) * (hd + 1) +
          static_cast<size_t>(kKeysPerTile) * hd);
}

template <typename T, int NPL>
__global__ void __launch_bounds__(kWarps * 32)
    AttentionPrefillKernel(const T* __restrict__ q, const T* __restrict__ k_cache,
                           const T* __restrict__ v_cache, T* __restrict__ out,
                           PagedAttentionArgs a) {
  extern __shared__ float smem[];
  const int hd = a.head_dim;
  float* s_q = smem;                           // [rows][hd], pre-scaled
  float* s_k = s_q + kRowsPerBlock * hd;       // [keys][hd + 1] (padded: no bank conflicts)
  float* s_v = s_k + kKeysPerTile * (hd + 1);  // [keys][hd]
  const int s = blockIdx.z, h = blockIdx.y;
  const int q0 = a.query_start[s];
  const int qlen = a.query_start[s + 1] - q0;
  const int first = blockIdx.x * kRowsPerBlock;
  if (first >= qlen) return;
  const int last = min(first + kRowsPerBlock, qlen) - 1;
  const int ctx = min(a.context_lens[s], a.max_blocks_per_seq * a.block_size);
  const int kv_end = max(0, min(ctx, ctx - qlen + last + 1));  // exclusive
  const int kvh = h / (a.num_heads / a.num_kv_heads);
  const int64_t q_width = static_cast<int64_t>(a.num_heads) * hd;
  const int64_t kv_width = static_cast<int64_t>(a.num_kv_heads) * hd;
  const int32_t* table = a.block_tables + static_cast<int64_t>(s) * a.max_blocks_per_seq;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;

  for (int idx = threadIdx.x; idx < kRowsPerBlock * hd; idx += blockDim.x) {
    const int r = idx / hd, d = idx % hd, i = first + r;
    s_q[idx] =
        i < qlen ? Load(q, (q0 + i) * q_width + static_cast<int64_t>(h) * hd + d) * a.scale : 0.0f;
  }
  float m[kRowsPerWarp], l[kRowsPerWarp], acc[kRowsPerWarp][NPL];
#pragma unroll
  for (int rr = 0; rr < kRowsPerWarp; ++rr) {
    m[rr] = -INFINITY;
    l[rr] = 0.0f;
#pragma unroll
    for (int j = 0; j < NPL; ++j) acc[rr][j] = 0.0f;
  }

  for (int kv0 = 0; kv0 < kv_end; kv0 += kKeysPerTile) {
    __syncthreads();  // previous tile fully consumed (and s_q written on the first pass)
    for (int idx = threadIdx.x; idx < kKeysPerTile * hd; idx += blockDim.x) {
      const int j = idx / hd, d = idx % hd, pos = kv0 + j;
      float kvk = 0.0f, kvv = 0.0f;
      if (pos < kv_end) {
        const int64_t slot =
            static_cast<int64_t>(table[pos / a.block_size]) * a.block_size + pos % a.block_size;
        const int64_t off = slot * kv_width + static_cast<int64_t>(kvh) * hd + d;
        kvk = Load(k_cache, off);
        kvv = Load(v_cache, off);
      }
      s_k[j * (hd + 1) + d] = kvk;
      s_v[j * hd + d] = kvv;
    }
    __syncthreads();
#pragma unroll
    for (int rr = 0; rr < kRowsPerWarp; ++rr) {
      const int r = warp * kRowsPerWarp + rr, i = first + r;
      if (i >= qlen) continue;           // warp-uniform
      const int limit = ctx - qlen + i;  // last position row i may attend (inclusive)
      const int pos = kv0 + lane;
      float score = -INFINITY;
      if (pos <= limit && pos < kv_end) {
        const float* qr = s_q + r * hd;
        const float* kr = s_k + lane * (hd + 1);
        float dot = 0.0f;
        for (int d = 0; d < hd; ++d) dot += qr[d] * kr[d];
        score = dot;
      }
      const float tile_max = WarpMax(score);
      if (tile_max == -INFINITY) continue;  // warp-uniform: nothing visible in this tile
      const float m_new = fmaxf(m[rr], tile_max);
      const float corr = __expf(m[rr] - m_new);
      const float p = score == -INFINITY ? 0.0f : __expf(score - m_new);
      l[rr] = l[rr] * corr + WarpSum(p);
#pragma unroll
      for (int j = 0; j < NPL; ++j) acc[rr][j] *= corr;
      for (int jj = 0; jj < kKeysPerTile; ++jj) {
        const float pj = __shfl_sync(0xffffffffu, p, jj);
        const float* vr = s_v + jj * hd;
#pragma unroll
        for (int j = 0; j < NPL; ++j) {
          const int d = lane + 32 * j;
          if (d < hd) acc[rr][j] += pj * vr[d];
        }
      }
      m[rr] = m_new;
    }
  }
#pragma unroll
  for (int rr = 0; rr < kRowsPerWarp; ++rr) {
    const int i = first + warp * kRowsPerWarp + rr;
    if (i >= qlen) continue;
    T* op = out + (q0 + i) * q_width + static_cast<int64_t>(h) * hd;
    const float inv = l[rr] > 0.0f ? 1.0f / l[rr] : 0.0f;
#pragma unroll
    for (int j = 0; j < NPL; ++j) {
      const int d = lane + 32 * j;
      if (d < hd) Store(op, d, acc[rr][j] * inv);
    }
  }
}

template <typename T, int NPL>
absl::Status Launch(cudaStream_t s, const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                    const AttentionBatch& b, const AttentionShape& sh, const Tensor& out) {
  const PagedAttentionArgs a = MakePagedAttentionArgs(b, sh);
  const size_t smem = SharedBytes(sh.head_dim);
  auto* kernel = &AttentionPrefillKernel<T, NPL>;
  if (smem > 48 * 1024) {
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    static_cast<int>(smem)));
  }
  const int tiles = (b.max_query_len + kRowsPerBlock - 1) / kRowsPerBlock;
  const dim3 grid(tiles, sh.num_heads, b.num_seqs);
  kernel<<<grid, kWarps * 32, smem, s>>>(q.as<T>(), k_cache.as<T>(), v_cache.as<T>(), out.as<T>(),
                                         a);
  CUDA_CHECK_LAUNCH("AttentionPrefillKernel");
  RecordLaunch(KernelFamily::kAttentionPrefill, reinterpret_cast<const void*>(kernel),
               static_cast<int64_t>(tiles) * sh.num_heads * b.num_seqs, kWarps * 32, smem);
  return absl::OkStatus();
}

}  // namespace

absl::Status AttentionPrefill(cudaStream_t s, const Tensor& q, const Tensor& k_cache,
                              const Tensor& v_cache, const AttentionBatch& batch,
                              const AttentionShape& shape, const Tensor& out) {
  RETURN_IF_ERROR(CheckAttentionDtypes(q, k_cache, v_cache, out));
  if (batch.num_seqs == 0 || batch.max_query_len <= 0) return absl::OkStatus();
  if (batch.num_seqs > 65535 || shape.num_heads > 65535) {
    return absl::InvalidArgumentError("attention: grid too large (seqs or heads > 65535)");
  }
  SATURN_DISPATCH_FLOAT(q.dtype, "attention", return ByHeadDim(shape.head_dim, [&](auto npl) {
                          return Launch<scalar_t, decltype(npl)::value>(s, q, k_cache, v_cache,
                                                                        batch, shape, out);
                        }););
}

}  // namespace saturn::gpu
