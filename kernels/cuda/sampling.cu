// Sampling on the device: one block per row, so full logits never leave the GPU. Implements
// exactly the row semantics documented on Backend::Sample, without sorting the vocabulary.
// The search and all of its arithmetic live in kernels/cuda/sample_search.h (shared with a
// host emulation test); this file holds the block's reductions and the launch.
//
// Precision: probabilities, the kept mass, every CDF sum and u are double, as in the CPU
// twin (kernels/cpu/sampling.cc), so both pick the same token for the same seed. Each pass
// reads the row once; sums are block reductions in a fixed order, so results are
// deterministic. 512 threads per block with __launch_bounds__(512) leave 128 registers per
// thread for the 15 double accumulators of a search pass.
//
// The row is rewritten once, in place, to z = logits / temperature (logits are scratch, as
// Backend::Sample allows) by the thread that later reads each element; p is recomputed on the
// fly. Ordering by z (not by rounded p) matches the CPU twin, which sorts by z.
#include <climits>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/kernel_plan.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/sample_search.h"

namespace saturn::gpu {
namespace {

namespace ss = saturn::sample_search;
using ss::kProbes;
using ss::kThreads;

__device__ __forceinline__ double WarpSumD(double v) {
  for (int o = ss::kWarpSize / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// The block policy of ss::SampleRowSearch: thread t visits i = t, t + kThreads, ...; the
// partials go through a xor butterfly per warp, then the warps add in order (CombineWarps),
// exactly as ss::EmulatedBlock replays it on the host.
struct DeviceBlock {
  double* red;  // shared: kWarps * kProbes doubles
  float* fred;  // shared: 32 floats

  __device__ void ProbeSums(const ss::RowView& r, const ss::Probes& p, ss::ProbeAcc* out) {
    ss::ProbeAcc acc;
#pragma unroll
    for (int j = 0; j < kProbes; ++j) acc.v[j] = 0.0;
    for (int i = threadIdx.x; i < r.n; i += kThreads) ss::ProbeElement(r, i, p, acc);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
    for (int j = 0; j < kProbes; ++j) acc.v[j] = WarpSumD(acc.v[j]);
    __syncthreads();  // red may still be read from the previous call
    if (lane == 0) {
#pragma unroll
      for (int j = 0; j < kProbes; ++j) red[warp * kProbes + j] = acc.v[j];
    }
    __syncthreads();
#pragma unroll
    for (int j = 0; j < kProbes; ++j) out->v[j] = ss::CombineWarps(red + j, kProbes);
  }

  __device__ double SumKeptExp(const ss::RowView& r, bool divide) {
    double part = 0.0;
    for (int i = threadIdx.x; i < r.n; i += kThreads) part += ss::KeptExpElement(r, i, divide);
    part = WarpSumD(part);
    __syncthreads();
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = part;
    __syncthreads();
    return ss::CombineWarps(red, 1);
  }

  __device__ float ScaleMax(float* x, int n, float temp) {
    float mx = -INFINITY;
    for (int i = threadIdx.x; i < n; i += kThreads) {
      x[i] = x[i] / temp;
      mx = fmaxf(mx, x[i]);
    }
    return BlockMax(mx, fred);
  }

  __device__ int ArgMax(const float* x, int n) {
    float bv;
    int bi;
    ArgMaxRange(x, 0, n, n, &bv, &bi);
    return bi < n ? bi : 0;
  }

  // The best of x[begin, end): value, and index or n for none; every thread gets it.
  __device__ void ArgMaxRange(const float* x, int begin, int end, int n, float* best_v,
                              int* best_i) {
    float bv = -INFINITY;
    int bi = n;
    for (int i = begin + threadIdx.x; i < end; i += kThreads) ss::ArgMaxElement(x[i], i, n, bv, bi);
    for (int o = ss::kWarpSize / 2; o > 0; o >>= 1) {
      const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
      const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
      ss::ArgMaxMerge(ov, oi, n, bv, bi);
    }
    __shared__ float s_v[ss::kWarps];
    __shared__ int s_i[ss::kWarps];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    __syncthreads();
    if (lane == 0) {
      s_v[warp] = bv;
      s_i[warp] = bi;
    }
    __syncthreads();
    bv = -INFINITY;
    bi = n;
    for (int w = 0; w < ss::kWarps; ++w) ss::ArgMaxMerge(s_v[w], s_i[w], n, bv, bi);
    *best_v = bv;
    *best_i = bi;
  }
};

__global__ void __launch_bounds__(kThreads)
    SampleKernel(float* logits, int vocab, const float* __restrict__ temperature,
                 const int32_t* __restrict__ top_k, const float* __restrict__ top_p,
                 const int64_t* __restrict__ seed, const int32_t* __restrict__ step,
                 int32_t* __restrict__ tokens) {
  __shared__ double red[ss::kWarps * kProbes];
  __shared__ float fred[32];
  const int row = blockIdx.x;
  DeviceBlock block{red, fred};
  const int t = ss::SampleRowSearch(block, logits + static_cast<int64_t>(row) * vocab, vocab,
                                    temperature[row], top_k[row], top_p[row], seed[row], step[row]);
  if (threadIdx.x == 0) tokens[row] = t;
}

// Fused set: a grid of (row, split). Sampled rows run the one-block search in split 0's block (the
// others return). Greedy rows scan a split each; the block that finishes last (threadfence,
// then a per-row counter, as CUDA's threadFenceReduction sample) merges the partials in
// split order and resets the counter for the next launch.
__global__ void __launch_bounds__(kThreads)
    SampleSplitKernel(float* logits, int vocab, const float* __restrict__ temperature,
                      const int32_t* __restrict__ top_k, const float* __restrict__ top_p,
                      const int64_t* __restrict__ seed, const int32_t* __restrict__ step,
                      int32_t* __restrict__ tokens, GreedySplitWorkspace ws, int splits) {
  __shared__ double red[ss::kWarps * kProbes];
  __shared__ float fred[32];
  const int row = blockIdx.x, split = blockIdx.y;
  DeviceBlock block{red, fred};
  float* x = logits + static_cast<int64_t>(row) * vocab;
  if (temperature[row] > 0.0f) {
    if (split != 0) return;
    const int t = ss::SampleRowSearch(block, x, vocab, temperature[row], top_k[row], top_p[row],
                                      seed[row], step[row]);
    if (threadIdx.x == 0) tokens[row] = t;
    return;
  }
  const ss::GreedyRange range = ss::GreedySplitRange(vocab, splits, split);
  float bv;
  int bi;
  block.ArgMaxRange(x, range.begin, range.end, vocab, &bv, &bi);
  if (threadIdx.x != 0) return;
  const int64_t part = static_cast<int64_t>(row) * splits;
  ws.values[part + split] = bv;
  ws.indices[part + split] = bi;
  __threadfence();  // the partial is visible before the count says so
  if (atomicAdd(&ws.done[row], 1u) != static_cast<unsigned>(splits - 1)) return;
  __threadfence();
  const volatile float* values = ws.values + part;
  const volatile int* indices = ws.indices + part;
  tokens[row] = ss::GreedyMerge(values, indices, splits, vocab);
  ws.done[row] = 0;
}

absl::Status CheckSampleArgs(const Tensor& logits, const SamplingBatch& p, const Tensor& tokens) {
  if (tokens.dtype != DType::kI32 || p.top_k.dtype != DType::kI32 || p.step.dtype != DType::kI32 ||
      p.temperature.dtype != DType::kF32 || p.top_p.dtype != DType::kF32) {
    return absl::InvalidArgumentError(
        "sample: expected i32 tokens/top_k/step and f32 temperature/top_p");
  }
  if (logits.rows > 0 && (logits.cols <= 0 || logits.cols > INT_MAX / 2)) {
    return absl::InvalidArgumentError(absl::StrCat("sample: bad vocabulary size ", logits.cols));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status SampleSplit(cudaStream_t s, int num_sms, const Tensor& logits, const SamplingBatch& p,
                         const Tensor& tokens, const GreedySplitWorkspace& ws) {
  const int splits = SampleSplits(logits.rows, logits.cols, num_sms);
  if (splits <= 1) return Sample(s, logits, p, tokens);
  if (absl::Status st = CheckSampleArgs(logits, p, tokens); !st.ok()) return st;
  const dim3 grid(static_cast<unsigned>(logits.rows), static_cast<unsigned>(splits));
  SampleSplitKernel<<<grid, kThreads, 0, s>>>(
      logits.as<float>(), static_cast<int>(logits.cols), p.temperature.as<float>(),
      p.top_k.as<int32_t>(), p.top_p.as<float>(), p.seed.as<int64_t>(), p.step.as<int32_t>(),
      tokens.as<int32_t>(), ws, splits);
  CUDA_CHECK_LAUNCH("SampleSplitKernel");
  RecordLaunch(KernelFamily::kSample, reinterpret_cast<const void*>(&SampleSplitKernel),
               logits.rows * splits, kThreads, 0);
  return absl::OkStatus();
}

absl::Status Sample(cudaStream_t s, const Tensor& logits, const SamplingBatch& p,
                    const Tensor& tokens) {
  if (absl::Status st = CheckSampleArgs(logits, p, tokens); !st.ok()) return st;
  if (logits.rows == 0) return absl::OkStatus();
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
