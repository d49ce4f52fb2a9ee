// Device helpers shared by the .cu files: typed load/store through float, SwiGLU's step, warp
// and block reductions. Header-only, device code only; no kernels and no state.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/tensor.h"

namespace saturn::gpu {

__device__ __forceinline__ float Load(const float* p, int64_t i) { return p[i]; }
__device__ __forceinline__ float Load(const __nv_bfloat16* p, int64_t i) {
  return __bfloat162float(p[i]);
}
__device__ __forceinline__ void Store(float* p, int64_t i, float v) { p[i] = v; }
__device__ __forceinline__ void Store(__nv_bfloat16* p, int64_t i, float v) {
  p[i] = __float2bfloat16_rn(v);
}

// SwiGLU's step, silu(g) * u, written once: swiglu.cu and the skinny GEMM's SwiGLU epilogue
// (gemm_skinny.cu) must round alike to give the same bits.
__device__ __forceinline__ float SiluMul(float g, float u) { return g / (1.0f + __expf(-g)) * u; }

__device__ __forceinline__ float WarpSum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float WarpMax(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Sum over the block; every thread gets the result. `scratch` holds >= 32 floats. The
// summation order is fixed, so the result is deterministic.
__device__ __forceinline__ float BlockSum(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = (blockDim.x + 31) >> 5;
  v = WarpSum(v);
  __syncthreads();  // scratch may still be read from a previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < nwarps ? scratch[lane] : 0.0f;
  return WarpSum(v);
}

__device__ __forceinline__ float BlockMax(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = (blockDim.x + 31) >> 5;
  v = WarpMax(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < nwarps ? scratch[lane] : -INFINITY;
  return WarpMax(v);
}

}  // namespace saturn::gpu

// Dispatches `body` (a generic lambda taking a typed null pointer) on f32 or bf16; other
// dtypes return Unimplemented from the enclosing function.
#define SATURN_DISPATCH_FLOAT(dtype, what, ...)                                         \
  if ((dtype) == ::saturn::DType::kF32) {                                               \
    using scalar_t = float;                                                             \
    __VA_ARGS__                                                                         \
  } else if ((dtype) == ::saturn::DType::kBF16) {                                       \
    using scalar_t = __nv_bfloat16;                                                     \
    __VA_ARGS__                                                                         \
  } else {                                                                              \
    return absl::UnimplementedError(                                                    \
        absl::StrCat(what, ": dtype ", DTypeName(dtype), " is not supported on CUDA")); \
  }
