// The one random draw per sampled row, shared by every backend so that a request's seed
// gives the same tokens on CPU and CUDA: a counter-based hash of (seed, step) mapped to a
// uniform double in [0, 1). Header-only; usable from host and device code.
#pragma once

#include <cstdint>

#include "kernels/base/host_device.h"
#include "kernels/base/split_mix64.h"

namespace saturn {

// Uniform in [0, 1) from the top 53 bits.
SATURN_HD double SampleUniform(int64_t seed, int32_t step) {
  const uint64_t h =
      SplitMix64(SplitMix64(static_cast<uint64_t>(seed)) ^
                 (static_cast<uint64_t>(static_cast<uint32_t>(step)) * 0xD1B54A32D192ED03ull));
  return static_cast<double>(h >> 11) * (1.0 / 9007199254740992.0);
}

}  // namespace saturn
