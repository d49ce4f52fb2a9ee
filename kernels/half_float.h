// The one home of Saturn's host conversions between f32 and the 16-bit float formats (bf16,
// IEEE f16): checkpoint loading (engine/model/safetensors.cc), weight upload and GEMM input
// rounding (kernels/cpu/). Rounding is to nearest with ties to even; a NaN stays a quiet NaN of the
// same sign with the top payload bits kept, and infinities stay infinities, as the x86 F16C /
// AVX512-BF16 instructions convert (tests/kernels/half_float_test.cc compares bit for bit).
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

namespace saturn {

inline float Bf16ToF32(uint16_t h) { return std::bit_cast<float>(static_cast<uint32_t>(h) << 16); }

inline uint16_t F32ToBf16(float f) {
  uint32_t x = std::bit_cast<uint32_t>(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40);  // qNaN
  x += 0x7fffu + ((x >> 16) & 1u);  // round to nearest, ties to even
  return static_cast<uint16_t>(x >> 16);
}

inline float F16ToF32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t man = h & 0x3ffu;
  if (exp == 0) {  // zero or subnormal: man * 2^-24
    const float v = std::ldexp(static_cast<float>(man), -24);
    return sign ? -v : v;
  }
  if (exp == 31) return std::bit_cast<float>(sign | 0x7f800000u | (man << 13));  // inf, nan
  return std::bit_cast<float>(sign | ((exp - 15 + 127) << 23) | (man << 13));
}

namespace half_detail {
// Rounds `m` right by `shift` (1..31) bits, to nearest with ties to even.
inline uint32_t ShiftRoundEven(uint32_t m, int shift) {
  const uint32_t q = m >> shift;
  const uint32_t rem = m & ((1u << shift) - 1);
  const uint32_t half = 1u << (shift - 1);
  return q + ((rem > half || (rem == half && (q & 1u))) ? 1u : 0u);
}
}  // namespace half_detail

inline uint16_t F32ToF16(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t a = x & 0x7fffffffu;
  if (a >= 0x7f800000u) {  // inf, or a NaN made quiet with its top payload bits kept
    return sign | 0x7c00u | (a > 0x7f800000u ? 0x200u | ((a >> 13) & 0x3ffu) : 0u);
  }
  if (a >= 0x477ff000u) return sign | 0x7c00u;  // >= 65520 rounds to inf
  const uint32_t e = a >> 23;
  if (e >= 113) {  // normal half: rebias the exponent, round the mantissa (a carry is right)
    return sign | static_cast<uint16_t>(half_detail::ShiftRoundEven(a - (112u << 23), 13));
  }
  if (a < 0x33000000u) return sign;  // <= 2^-25 rounds to zero
  // Subnormal half: value = m_h * 2^-24 with m_h = mantissa * 2^(e - 126).
  const uint32_t m = (a & 0x7fffffu) | 0x800000u;
  return sign | static_cast<uint16_t>(half_detail::ShiftRoundEven(m, static_cast<int>(126 - e)));
}

}  // namespace saturn
