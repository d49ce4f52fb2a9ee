// kernels/half_float.h: every 16-bit pattern round-trips, rounding is to nearest-even at the
// boundaries, NaNs stay quiet NaNs, and where the CPU has F16C / AVX512-BF16 the conversions
// equal the hardware's bit for bit on a few million f32 values.
#include "kernels/half_float.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>
#define SATURN_X86 1
#endif

namespace saturn {
namespace {

bool IsF16Nan(uint16_t h) { return (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0; }
bool IsBf16Nan(uint16_t h) { return (h & 0x7f80u) == 0x7f80u && (h & 0x7fu) != 0; }

// A spread of f32 bit patterns: every exponent, random mantissas, both signs, plus the
// halfway and near-halfway mantissas where rounding decides.
std::vector<float> TestValues() {
  std::vector<float> v;
  std::mt19937 rng(7);
  for (uint32_t sign = 0; sign < 2; ++sign) {
    for (uint32_t exp = 0; exp < 256; ++exp) {
      for (int i = 0; i < 4000; ++i) {
        v.push_back(std::bit_cast<float>((sign << 31) | (exp << 23) |
                                         (static_cast<uint32_t>(rng()) & 0x7fffffu)));
      }
      for (uint32_t low : {0x0u, 0x1000u, 0x0fffu, 0x1001u, 0x3000u, 0x8000u, 0x7fffu, 0x8001u,
                           0x18000u, 0x7fffffu}) {
        v.push_back(std::bit_cast<float>((sign << 31) | (exp << 23) | low));
      }
    }
  }
  return v;
}

TEST(HalfFloatTest, EveryF16PatternRoundTrips) {
  for (uint32_t h = 0; h < 0x10000u; ++h) {
    const uint16_t back = F32ToF16(F16ToF32(static_cast<uint16_t>(h)));
    if (IsF16Nan(static_cast<uint16_t>(h))) {
      EXPECT_TRUE(IsF16Nan(back)) << std::hex << h;
      EXPECT_EQ(back & 0x8200u, (h & 0x8000u) | 0x200u) << std::hex << h;  // sign kept, quiet
    } else {
      EXPECT_EQ(back, h) << std::hex << h;
    }
  }
}

TEST(HalfFloatTest, EveryBf16PatternRoundTrips) {
  for (uint32_t h = 0; h < 0x10000u; ++h) {
    const uint16_t back = F32ToBf16(Bf16ToF32(static_cast<uint16_t>(h)));
    if (IsBf16Nan(static_cast<uint16_t>(h))) {
      EXPECT_TRUE(IsBf16Nan(back)) << std::hex << h;
      EXPECT_EQ(back & 0x8040u, (h & 0x8000u) | 0x40u) << std::hex << h;
    } else {
      EXPECT_EQ(back, h) << std::hex << h;
    }
  }
}

TEST(HalfFloatTest, RoundsToNearestEvenAndSaturatesToInfinity) {
  EXPECT_EQ(F32ToF16(1.0f), 0x3c00u);
  EXPECT_EQ(F32ToF16(1.0f + 0x1p-11f), 0x3c00u);      // halfway, even stays
  EXPECT_EQ(F32ToF16(1.0f + 3 * 0x1p-11f), 0x3c02u);  // halfway, odd goes up
  EXPECT_EQ(F32ToF16(65504.0f), 0x7bffu);             // largest finite
  EXPECT_EQ(F32ToF16(65519.0f), 0x7bffu);
  EXPECT_EQ(F32ToF16(65520.0f), 0x7c00u);  // rounds to inf
  EXPECT_EQ(F32ToF16(-std::numeric_limits<float>::infinity()), 0xfc00u);
  EXPECT_EQ(F32ToF16(0x1p-24f), 0x0001u);  // smallest subnormal
  EXPECT_EQ(F32ToF16(0x1p-25f), 0x0000u);  // halfway to it: even (zero)
  EXPECT_EQ(F32ToF16(0x1.8p-25f), 0x0001u);
  EXPECT_EQ(F32ToF16(-0.0f), 0x8000u);
  EXPECT_EQ(F32ToBf16(1.0f + 0x1p-8f), 0x3f80u);  // halfway, even stays
  EXPECT_EQ(F32ToBf16(1.0f + 3 * 0x1p-8f), 0x3f82u);
  EXPECT_EQ(F32ToBf16(std::numeric_limits<float>::max()), 0x7f80u);  // rounds to inf
  EXPECT_EQ(F16ToF32(0x0001u), 0x1p-24f);
  EXPECT_EQ(F16ToF32(0xfbffu), -65504.0f);
  EXPECT_TRUE(std::isnan(F16ToF32(0x7e00u)));
}

#ifdef SATURN_X86
__attribute__((target("f16c"))) uint16_t HardwareF16(float f) {
  return static_cast<uint16_t>(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

// CPUID leaf 1, ECX bit 29 (clang 14's __builtin_cpu_supports does not know "f16c").
bool HasF16c() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  return __get_cpuid(1, &a, &b, &c, &d) != 0 && (c & bit_F16C) != 0;
}

TEST(HalfFloatTest, F16MatchesTheF16cInstruction) {
  if (!HasF16c()) GTEST_SKIP() << "this CPU has no F16C";
  int mismatches = 0;
  for (float f : TestValues()) {
    if (F32ToF16(f) != HardwareF16(f) && ++mismatches <= 5) {
      ADD_FAILURE() << std::hex << std::bit_cast<uint32_t>(f) << ": " << F32ToF16(f) << " vs F16C "
                    << HardwareF16(f);
    }
  }
  EXPECT_EQ(mismatches, 0);
}

__attribute__((target("avx512f,avx512vl,avx512bf16"))) uint16_t HardwareBf16(float f) {
  const __m128bh r = _mm_cvtneps_pbh(_mm_set1_ps(f));
  return static_cast<uint16_t>(_mm_extract_epi16((__m128i)r, 0));
}

TEST(HalfFloatTest, Bf16MatchesTheAvx512Bf16Instruction) {
  if (!__builtin_cpu_supports("avx512bf16")) GTEST_SKIP() << "this CPU has no AVX512-BF16";
  int mismatches = 0;
  for (float f : TestValues()) {
    const uint16_t ours = F32ToBf16(f), hw = HardwareBf16(f);
    // vcvtneps2bf16 flushes f32 denormal inputs to zero (it ignores MXCSR.DAZ and always
    // treats them as zero); ours rounds them. Compare only where the instruction is exact.
    const bool denormal = std::fpclassify(f) == FP_SUBNORMAL;
    if (!denormal && ours != hw && ++mismatches <= 5) {
      ADD_FAILURE() << std::hex << std::bit_cast<uint32_t>(f) << ": " << ours << " vs " << hw;
    }
  }
  EXPECT_EQ(mismatches, 0);
}
#endif

}  // namespace
}  // namespace saturn
