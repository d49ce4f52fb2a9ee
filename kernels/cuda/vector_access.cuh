// 16-byte vector loads and stores for the memory-bound kernels: kVec<T> elements (8 bf16 or
// 4 f32) at p[i .. i + kVec<T>), i a multiple of kVec<T>, p 16-byte aligned. The launcher picks
// this path only when CanVectorize (vector_access.h) holds. Header-only, device code only.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/vector_access.h"

namespace saturn::gpu {

template <typename T>
constexpr int kVec = static_cast<int>(kVectorBytes / sizeof(T));

template <typename T>
__device__ __forceinline__ void LoadVec(const T* p, int64_t i, float (&v)[kVec<T>]) {
  const uint4 raw = *reinterpret_cast<const uint4*>(p + i);
  const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
  for (int k = 0; k < kVec<T>; ++k) v[k] = Load(e, k);
}

template <typename T>
__device__ __forceinline__ void StoreVec(T* p, int64_t i, const float (&v)[kVec<T>]) {
  uint4 raw;
  T* e = reinterpret_cast<T*>(&raw);
#pragma unroll
  for (int k = 0; k < kVec<T>; ++k) Store(e, k, v[k]);
  *reinterpret_cast<uint4*>(p + i) = raw;
}

// Copies `bytes` (a multiple of 16, both pointers 16-byte aligned) with the block's threads,
// 16 bytes per load; src == nullptr writes zeros (all-zero bits are 0 in f32 and bf16).
__device__ __forceinline__ void CopyRowVec(const void* src, void* dst, int64_t bytes) {
  const uint4* s = static_cast<const uint4*>(src);
  uint4* d = static_cast<uint4*>(dst);
  for (int64_t i = threadIdx.x; i < bytes / 16; i += blockDim.x) {
    d[i] = s != nullptr ? s[i] : make_uint4(0, 0, 0, 0);
  }
}

}  // namespace saturn::gpu
