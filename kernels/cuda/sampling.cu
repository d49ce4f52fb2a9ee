// Sampling on the device: one block per row, so full logits never leave the GPU. Implements
// exactly the row semantics documented on Backend::Sample (greedy argmax; temperature; top-k
// by z with lower index winning ties; softmax over the kept; order by (p desc, index asc);
// top-p prefix; u = SampleUniform(seed, step) * kept mass; first token whose cumulative mass
// exceeds u) without sorting the vocabulary:
//
//   The order (value desc, index asc) is a total order. "The first element in that order whose
//   inclusive prefix sum reaches theta" is found by a search on the value's order-preserving
//   32-bit key (largest key T with sum_{key >= T} w >= theta, 15 probes per pass, so 8 passes),
//   then a search on the index inside the tie group key == T. Each pass reads the row once;
//   sums are block reductions in a fixed order, so results are deterministic.
//
// The row is rewritten once, in place, to z = logits / temperature (logits are scratch, as
// Backend::Sample allows) by the thread that later reads each element; p is recomputed on the
// fly. Ordering by z (not by rounded p) matches the CPU twin, which sorts by z.
#include <climits>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/ops.h"
#include "kernels/sampling_rng.h"

namespace saturn::gpu {
namespace {

constexpr int kThreads = 1024;
constexpr int kProbes = 15;

__device__ __forceinline__ uint32_t OrderKey(float f) {
  const uint32_t b = __float_as_uint(f);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

// What a search sums over: the kept elements (those at or before the bound in (z desc,
// index asc) order), keyed by z, or, in tie mode, the kept elements whose z key equals `tie`,
// keyed by (n - 1 - index) so that a larger key is a lower index. The weight is 1 (counting)
// or p = exp(z - mx) / sum, computed on the fly so the row keeps z and no element is rewritten.
struct RowView {
  const float* x;  // z = logits / temperature
  int n;
  bool ones;
  bool tie_mode;
  uint32_t tie;
  uint32_t bound_key;  // kept: key > bound_key, or key == bound_key and index <= bound_idx
  int bound_idx;
  float mx;
  float sum;
};

// out[j] = sum of w over elements with key >= probes[j]; identical in every thread.
__device__ void ProbeSums(const RowView& r, const uint32_t (&probes)[kProbes],
                          float (&out)[kProbes], float* red) {
  float acc[kProbes];
#pragma unroll
  for (int j = 0; j < kProbes; ++j) acc[j] = 0.0f;
  for (int i = threadIdx.x; i < r.n; i += blockDim.x) {
    const float z = r.x[i];
    uint32_t key = OrderKey(z);
    if (key < r.bound_key || (key == r.bound_key && i > r.bound_idx)) continue;
    if (r.tie_mode) {
      if (key != r.tie) continue;
      key = static_cast<uint32_t>(r.n - 1 - i);
    }
    const float w = r.ones ? 1.0f : expf(z - r.mx) / r.sum;
#pragma unroll
    for (int j = 0; j < kProbes; ++j) acc[j] += key >= probes[j] ? w : 0.0f;
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
#pragma unroll
  for (int j = 0; j < kProbes; ++j) acc[j] = WarpSum(acc[j]);
  __syncthreads();  // red may still be read from the previous call
  if (lane == 0) {
#pragma unroll
    for (int j = 0; j < kProbes; ++j) red[warp * kProbes + j] = acc[j];
  }
  __syncthreads();
#pragma unroll
  for (int j = 0; j < kProbes; ++j) {
    float s = 0.0f;
    for (int w = 0; w < nwarps; ++w) s += red[w * kProbes + j];
    out[j] = s;
  }
}

__device__ float SumAtLeast(const RowView& r, uint64_t t, float* red) {
  if (t > 0xFFFFFFFFull) {
    __syncthreads();
    return 0.0f;
  }
  uint32_t probes[kProbes];
#pragma unroll
  for (int j = 0; j < kProbes; ++j) probes[j] = static_cast<uint32_t>(t);
  float out[kProbes];
  ProbeSums(r, probes, out, red);
  return out[0];
}

struct Selected {
  uint32_t key;
  float base;   // sum of w over keys > key
  float theta;  // theta, lowered to the total when rounding left it out of reach
  bool strict;
};

__device__ __forceinline__ bool Reaches(float f, float theta, bool strict) {
  return strict ? f > theta : f >= theta;
}

// Largest key T in [0, hi] with sum_{key >= T} w reaching theta.
__device__ Selected SelectLargest(const RowView& r, uint64_t hi, float theta, bool strict,
                                  float* red) {
  const float total = SumAtLeast(r, 0, red);
  if (!Reaches(total, theta, strict)) {
    theta = total;  // u rounded past the total mass: take the last element
    strict = false;
  }
  uint64_t lo = 0;
  while (lo < hi) {
    const uint64_t step = (hi - lo + 15) / 16;
    uint32_t probes[kProbes];
#pragma unroll
    for (int j = 0; j < kProbes; ++j) {
      const uint64_t p = lo + step * (j + 1);
      probes[j] = static_cast<uint32_t>(p < hi ? p : hi);
    }
    float out[kProbes];
    ProbeSums(r, probes, out, red);
    int best = -1;
#pragma unroll
    for (int j = 0; j < kProbes; ++j) {
      if (best == j - 1 && Reaches(out[j], theta, strict)) best = j;
    }
    if (best < 0) {
      hi = probes[0] - 1;
    } else if (best == kProbes - 1) {
      lo = probes[best];
    } else {
      lo = probes[best];
      hi = probes[best + 1] - 1;
    }
  }
  return Selected{static_cast<uint32_t>(lo), SumAtLeast(r, lo + 1, red), theta, strict};
}

// Index of the first kept element in (z desc, index asc) order whose inclusive prefix sum
// of w reaches theta (> theta when strict).
__device__ int SelectIndex(RowView r, float theta, bool strict, float* red) {
  r.tie_mode = false;
  const Selected v = SelectLargest(r, 0xFFFFFFFFull, theta, strict, red);
  r.tie_mode = true;
  r.tie = v.key;
  const Selected t = SelectLargest(r, r.n - 1, v.theta - v.base, v.strict, red);
  return r.n - 1 - static_cast<int>(t.key);
}

__device__ int ArgMax(const float* x, int n, float* red) {
  float bv = -INFINITY;
  int bi = n;
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    const float v = x[i];
    if (v > bv || (bi == n && !isnan(v))) {
      bv = v;
      bi = i;
    }
  }
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
    const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
    if (ov > bv || (ov == bv && oi < bi) || (bi == n && oi < n)) {
      bv = ov;
      bi = oi;
    }
  }
  __shared__ float s_v[32];
  __shared__ int s_i[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  __syncthreads();
  if (lane == 0) {
    s_v[warp] = bv;
    s_i[warp] = bi;
  }
  __syncthreads();
  bv = -INFINITY;
  bi = n;
  for (int w = 0; w < nwarps; ++w) {
    if (s_v[w] > bv || (s_v[w] == bv && s_i[w] < bi) || (bi == n && s_i[w] < n)) {
      bv = s_v[w];
      bi = s_i[w];
    }
  }
  (void)red;
  return bi < n ? bi : 0;
}

__global__ void __launch_bounds__(kThreads)
    SampleKernel(float* logits, int vocab, const float* __restrict__ temperature,
                 const int32_t* __restrict__ top_k, const float* __restrict__ top_p,
                 const int64_t* __restrict__ seed, const int32_t* __restrict__ step,
                 int32_t* __restrict__ tokens) {
  __shared__ float red[32 * kProbes];
  const int row = blockIdx.x;
  float* x = logits + static_cast<int64_t>(row) * vocab;
  const float temp = temperature[row];
  if (!(temp > 0.0f)) {
    const int t = ArgMax(x, vocab, red);
    if (threadIdx.x == 0) tokens[row] = t;
    return;
  }
  // z = logits / temperature, in place; its maximum is always kept.
  float mx = -INFINITY;
  for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
    x[i] = x[i] / temp;
    mx = fmaxf(mx, x[i]);
  }
  mx = BlockMax(mx, red);
  // Everything is kept to start with: the bound is the last element in order.
  RowView r{x, vocab, /*ones=*/true, false, 0, 0u, vocab - 1, mx, 1.0f};
  // top-k on z: the k-th element in (z desc, index asc) order becomes the bound.
  const int k = top_k[row];
  if (k > 0 && k < vocab) {
    const int k_idx = SelectIndex(r, static_cast<float>(k), false, red);
    r.bound_key = OrderKey(x[k_idx]);  // z is never rewritten: every thread reads the same
    r.bound_idx = k_idx;
  }
  // Softmax denominator over the kept.
  float part = 0.0f;
  for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
    const uint32_t key = OrderKey(x[i]);
    if (key > r.bound_key || (key == r.bound_key && i <= r.bound_idx)) part += expf(x[i] - mx);
  }
  r.sum = BlockSum(part, red);
  r.ones = false;
  // top-p: the shortest prefix whose mass reaches top_p; its last element becomes the bound,
  // and the kept mass is the prefix's summed p. Without top-p the mass is 1 (as the CPU twin).
  const float tp = top_p[row];
  float mass = 1.0f;
  if (tp < 1.0f) {
    const int p_idx = SelectIndex(r, tp, false, red);
    r.bound_key = OrderKey(x[p_idx]);
    r.bound_idx = p_idx;
    part = 0.0f;
    for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
      const uint32_t key = OrderKey(x[i]);
      if (key > r.bound_key || (key == r.bound_key && i <= r.bound_idx)) {
        part += expf(x[i] - mx) / r.sum;
      }
    }
    mass = BlockSum(part, red);
  }
  const float u = static_cast<float>(SampleUniform(seed[row], step[row]) * mass);
  const int t = SelectIndex(r, u, /*strict=*/true, red);
  if (threadIdx.x == 0) tokens[row] = t;
}

}  // namespace

absl::Status Sample(cudaStream_t s, const Tensor& logits, const SamplingBatch& p,
                    const Tensor& tokens) {
  if (tokens.dtype != DType::kI32 || p.top_k.dtype != DType::kI32 || p.step.dtype != DType::kI32 ||
      p.temperature.dtype != DType::kF32 || p.top_p.dtype != DType::kF32) {
    return absl::InvalidArgumentError(
        "sample: expected i32 tokens/top_k/step and f32 temperature/top_p");
  }
  if (logits.rows == 0) return absl::OkStatus();
  if (logits.cols <= 0 || logits.cols > INT_MAX / 2) {
    return absl::InvalidArgumentError(absl::StrCat("sample: bad vocabulary size ", logits.cols));
  }
  SampleKernel<<<static_cast<unsigned>(logits.rows), kThreads, 0, s>>>(
      logits.as<float>(), static_cast<int>(logits.cols), p.temperature.as<float>(),
      p.top_k.as<int32_t>(), p.top_p.as<float>(), p.seed.as<int64_t>(), p.step.as<int32_t>(),
      tokens.as<int32_t>());
  CUDA_CHECK_LAUNCH("SampleKernel");
  RecordLaunch(KernelFamily::kSample, reinterpret_cast<const void*>(&SampleKernel), logits.rows,
               kThreads, 0);
  return absl::OkStatus();
}

}  // namespace saturn::gpu
