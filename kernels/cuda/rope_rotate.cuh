// The RoPE rotation shared by rope.cu and rope_kv_write.cu, so the fused and the separate
// kernels rotate with the same arithmetic. Pair i (0 <= i < head_dim / 2) of a head at position
// pos turns by pos * inv_freq, inv_freq = theta^(-2i/hd) in f32 (exp2f), scaled as
// kernels/rope_params.h says (Llama 3.x); sincosf does the full-range reduction. Elements i and
// i + hd/2 pair (rotate-half, as Hugging Face Llama). src and dst may be the same head.
#pragma once

#include <cuda_runtime.h>

#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/vector_access.cuh"
#include "kernels/rope_params.h"

namespace saturn::gpu {

__device__ __forceinline__ void RopeCosSin(float pos, int i, int head_dim, float log2_theta,
                                           const RopeParams& rope, float* c, float* s) {
  const float inv_freq = ScaleRopeInvFreq<float>(rope, exp2f(-log2_theta * (2.0f * i / head_dim)));
  sincosf(pos * inv_freq, s, c);
}

// Pair i of one head.
template <typename T>
__device__ __forceinline__ void RotatePair(const T* src, T* dst, int i, int half, float c,
                                           float s) {
  const float x1 = Load(src, i), x2 = Load(src, i + half);
  Store(dst, i, x1 * c - x2 * s);
  Store(dst, i + half, x2 * c + x1 * s);
}

// Pairs i .. i + kVec<T> of one head, 16 bytes a load (half a head is whole vectors and both
// heads 16-byte aligned).
template <typename T>
__device__ __forceinline__ void RotatePairsVec(const T* src, T* dst, int i, int half, float pos,
                                               float log2_theta, int head_dim,
                                               const RopeParams& rope) {
  constexpr int N = kVec<T>;
  float x1[N], x2[N], o1[N], o2[N];
  LoadVec(src, i, x1);
  LoadVec(src, i + half, x2);
#pragma unroll
  for (int e = 0; e < N; ++e) {
    float s, c;
    RopeCosSin(pos, i + e, head_dim, log2_theta, rope, &c, &s);
    o1[e] = x1[e] * c - x2[e] * s;
    o2[e] = x2[e] * c + x1[e] * s;
  }
  StoreVec(dst, i, o1);
  StoreVec(dst, i + half, o2);
}

}  // namespace saturn::gpu
