// kernels/base/split_mix64.h: SplitMix64 is the reference SplitMix64 finaliser (Steele, Lea
// and Flood), so the sampling draws, the random weights and the request seeds built on it stay
// the same bits on every backend and release.
#include "kernels/base/split_mix64.h"

#include <gtest/gtest.h>

#include <cstdint>

namespace saturn {
namespace {

TEST(SplitMix64Test, MatchesTheReferenceSequence) {
  // The reference generator's first two outputs from state 0 (each call adds the golden
  // gamma to the state, then mixes it).
  EXPECT_EQ(SplitMix64(0), 0xE220A8397B1DCDAFull);
  EXPECT_EQ(SplitMix64(0x9E3779B97F4A7C15ull), 0x6E789E6AA1B965F4ull);
}

}  // namespace
}  // namespace saturn
