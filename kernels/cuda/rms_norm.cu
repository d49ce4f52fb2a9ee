// RMSNorm, plain and fused with the residual add: out = x / rms(x) * weight, row-wise, with
// the sum of squares in f32. One block per row; the row is read twice (the second read hits
// L1/L2). In place (out == x, or out == residual) is safe: each thread rewrites only the
// elements it read itself. Rows of whole 16-byte vectors on aligned pointers take the vector
// kernels (one 16-byte load per 8 bf16); any other view takes the scalar ones.
#include "absl/strings/str_cat.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/vector_access.cuh"

namespace saturn::gpu {
namespace {

// Both kernels' second pass: dst = row * inv * w, the block's threads striding the row.
template <typename T, typename W>
__device__ __forceinline__ void ScaleRow(const T* row, const W* __restrict__ w, float inv, T* dst,
                                         int64_t cols) {
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    Store(dst, c, Load(row, c) * inv * Load(w, c));
  }
}

template <typename T, typename W>
__global__ void RmsNormKernel(const T* __restrict__ x, const W* __restrict__ w, float eps, T* out,
                              int64_t cols) {
  __shared__ float scratch[32];
  const T* row = x + blockIdx.x * cols;
  float ss = 0.0f;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    const float v = Load(row, c);
    ss += v * v;
  }
  const float inv = rsqrtf(BlockSum(ss, scratch) / static_cast<float>(cols) + eps);
  ScaleRow(row, w, inv, out + blockIdx.x * cols, cols);
}

// residual += x; out = rmsnorm(residual) * w. The norm uses the stored (rounded) residual
// so that it agrees with what later layers read back.
template <typename T, typename W>
__global__ void AddRmsNormKernel(const T* x, T* residual, const W* __restrict__ w, float eps,
                                 T* out, int64_t cols) {
  __shared__ float scratch[32];
  const T* xr = x + blockIdx.x * cols;
  T* rr = residual + blockIdx.x * cols;
  float ss = 0.0f;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    Store(rr, c, Load(xr, c) + Load(rr, c));
    const float v = Load(rr, c);
    ss += v * v;
  }
  const float inv = rsqrtf(BlockSum(ss, scratch) / static_cast<float>(cols) + eps);
  ScaleRow(rr, w, inv, out + blockIdx.x * cols, cols);
}

// The same two kernels over 16-byte vectors (cols % kVec<T> == 0, aligned rows); their second
// pass: dst = row * inv * w over the row's `packs` vectors.
template <typename T>
__device__ __forceinline__ void ScaleRowVec(const T* row, const T* __restrict__ w, float inv,
                                            T* dst, int64_t packs) {
  constexpr int N = kVec<T>;
  for (int64_t p = threadIdx.x; p < packs; p += blockDim.x) {
    float v[N], g[N];
    LoadVec(row, p * N, v);
    LoadVec(w, p * N, g);
#pragma unroll
    for (int k = 0; k < N; ++k) v[k] = v[k] * inv * g[k];
    StoreVec(dst, p * N, v);
  }
}

template <typename T>
__global__ void RmsNormVecKernel(const T* x, const T* __restrict__ w, float eps, T* out,
                                 int64_t cols) {
  constexpr int N = kVec<T>;
  __shared__ float scratch[32];
  const T* row = x + blockIdx.x * cols;
  const int64_t packs = cols / N;
  float ss = 0.0f;
  for (int64_t p = threadIdx.x; p < packs; p += blockDim.x) {
    float v[N];
    LoadVec(row, p * N, v);
#pragma unroll
    for (int k = 0; k < N; ++k) ss += v[k] * v[k];
  }
  const float inv = rsqrtf(BlockSum(ss, scratch) / static_cast<float>(cols) + eps);
  ScaleRowVec(row, w, inv, out + blockIdx.x * cols, packs);
}

template <typename T>
__global__ void AddRmsNormVecKernel(const T* x, T* residual, const T* __restrict__ w, float eps,
                                    T* out, int64_t cols) {
  constexpr int N = kVec<T>;
  __shared__ float scratch[32];
  const T* xr = x + blockIdx.x * cols;
  T* rr = residual + blockIdx.x * cols;
  const int64_t packs = cols / N;
  float ss = 0.0f;
  for (int64_t p = threadIdx.x; p < packs; p += blockDim.x) {
    float a[N], r[N];
    LoadVec(xr, p * N, a);
    LoadVec(rr, p * N, r);
#pragma unroll
    for (int k = 0; k < N; ++k) r[k] += a[k];
    StoreVec(rr, p * N, r);
    LoadVec(rr, p * N, r);  // the stored (rounded) residual, as later layers read it
#pragma unroll
    for (int k = 0; k < N; ++k) ss += r[k] * r[k];
  }
  const float inv = rsqrtf(BlockSum(ss, scratch) / static_cast<float>(cols) + eps);
  ScaleRowVec(rr, w, inv, out + blockIdx.x * cols, packs);
}

int ThreadsFor(int64_t cols) { return cols >= 1024 ? 512 : (cols >= 256 ? 256 : 128); }

absl::Status ExpectSame(const Tensor& a, const Tensor& b, const char* what) {
  if (a.dtype == b.dtype) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(what, ": dtypes differ (", DTypeName(a.dtype), " vs ", DTypeName(b.dtype), ")"));
}

}  // namespace

absl::Status RmsNorm(cudaStream_t s, const Tensor& x, const Tensor& weight, float eps,
                     const Tensor& out) {
  RETURN_IF_ERROR(ExpectSame(x, out, "rms_norm"));
  RETURN_IF_ERROR(ExpectSame(x, weight, "rms_norm"));
  if (x.rows == 0) return absl::OkStatus();
  const int threads = ThreadsFor(x.cols);
  SATURN_DISPATCH_FLOAT(x.dtype, "rms_norm", {
    if (CanVectorize(x.cols, sizeof(scalar_t), {x.data, weight.data, out.data})) {
      RmsNormVecKernel<scalar_t><<<static_cast<unsigned>(x.rows), threads, 0, s>>>(
          x.as<scalar_t>(), weight.as<scalar_t>(), eps, out.as<scalar_t>(), x.cols);
      CUDA_CHECK_LAUNCH("RmsNormVecKernel");
      RecordLaunch(KernelFamily::kRmsNorm,
                   reinterpret_cast<const void*>(&RmsNormVecKernel<scalar_t>), x.rows, threads, 0);
      return absl::OkStatus();
    }
    RmsNormKernel<scalar_t, scalar_t><<<static_cast<unsigned>(x.rows), threads, 0, s>>>(
        x.as<scalar_t>(), weight.as<scalar_t>(), eps, out.as<scalar_t>(), x.cols);
    CUDA_CHECK_LAUNCH("RmsNormKernel");
    RecordLaunch(KernelFamily::kRmsNorm,
                 reinterpret_cast<const void*>(&RmsNormKernel<scalar_t, scalar_t>), x.rows, threads,
                 0);
    return absl::OkStatus();
  })
}

absl::Status AddRmsNorm(cudaStream_t s, const Tensor& x, const Tensor& residual,
                        const Tensor& weight, float eps, const Tensor& out) {
  RETURN_IF_ERROR(ExpectSame(x, out, "add_rms_norm"));
  RETURN_IF_ERROR(ExpectSame(x, residual, "add_rms_norm"));
  RETURN_IF_ERROR(ExpectSame(x, weight, "add_rms_norm"));
  if (x.rows == 0) return absl::OkStatus();
  const int threads = ThreadsFor(x.cols);
  SATURN_DISPATCH_FLOAT(x.dtype, "add_rms_norm", {
    if (CanVectorize(x.cols, sizeof(scalar_t), {x.data, residual.data, weight.data, out.data})) {
      AddRmsNormVecKernel<scalar_t><<<static_cast<unsigned>(x.rows), threads, 0, s>>>(
          x.as<scalar_t>(), residual.as<scalar_t>(), weight.as<scalar_t>(), eps, out.as<scalar_t>(),
          x.cols);
      CUDA_CHECK_LAUNCH("AddRmsNormVecKernel");
      RecordLaunch(KernelFamily::kAddRmsNorm,
                   reinterpret_cast<const void*>(&AddRmsNormVecKernel<scalar_t>), x.rows, threads,
                   0);
      return absl::OkStatus();
    }
    AddRmsNormKernel<scalar_t, scalar_t><<<static_cast<unsigned>(x.rows), threads, 0, s>>>(
        x.as<scalar_t>(), residual.as<scalar_t>(), weight.as<scalar_t>(), eps, out.as<scalar_t>(),
        x.cols);
    CUDA_CHECK_LAUNCH("AddRmsNormKernel");
    RecordLaunch(KernelFamily::kAddRmsNorm,
                 reinterpret_cast<const void*>(&AddRmsNormKernel<scalar_t, scalar_t>), x.rows,
                 threads, 0);
    return absl::OkStatus();
  })
}

}  // namespace saturn::gpu
