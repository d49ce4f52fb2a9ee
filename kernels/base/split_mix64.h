// SplitMix64's finaliser: a 64-bit mixing hash, the one Saturn uses wherever it turns a
// counter or a seed into random bits (sampling draws, random weights, request seeds).
// Header-only; usable from host and device code.
#pragma once

#include <cstdint>

#include "kernels/base/host_device.h"

namespace saturn {

SATURN_HD uint64_t SplitMix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

}  // namespace saturn
