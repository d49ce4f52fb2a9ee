// The one random draw per sampled row, shared by every backend so that a request's seed
// gives the same tokens on CPU and CUDA: a counter-based hash of (seed, step) mapped to a
// uniform double in [0, 1). Header-only; usable from host and device code.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define SATURN_HD __host__ __device__ __forceinline__
#else
#define SATURN_HD inline
#endif

namespace saturn {

SATURN_HD uint64_t SplitMix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Uniform in [0, 1) from the top 53 bits.
SATURN_HD double SampleUniform(int64_t seed, int32_t step) {
  const uint64_t h =
      SplitMix64(SplitMix64(static_cast<uint64_t>(seed)) ^
                 (static_cast<uint64_t>(static_cast<uint32_t>(step)) * 0xD1B54A32D192ED03ull));
  return static_cast<double>(h >> 11) * (1.0 / 9007199254740992.0);
}

}  // namespace saturn
