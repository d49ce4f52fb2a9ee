// QuantizeRows / DequantizeRows (quant_blocks.h). The rounding is ggml's reference quantizer's:
//  - q8_0: d = max |x| / 127; q = round-half-away(x / d) (x times 1 / d in f32, d before its
//    f16 rounding);
//  - q4_0: m = the block's value of largest magnitude (the first, on ties), sign kept;
//    d = m / -8; q = min(15, trunc(x / d + 8.5)) (again x times 1 / d), so m maps to 0.
// Both store d rounded to f16 (round to nearest even).
#include "kernels/quant_blocks.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "kernels/half_float.h"

namespace saturn {
namespace {

constexpr int kBlock = 32;

void QuantizeBlockQ8_0(const float* x, uint8_t* out) {
  float amax = 0;
  for (int i = 0; i < kBlock; ++i) amax = std::max(amax, std::fabs(x[i]));
  const float d = amax / 127.0f;
  const float id = d != 0 ? 1.0f / d : 0.0f;
  const uint16_t dh = F32ToF16(d);
  std::memcpy(out, &dh, 2);
  for (int i = 0; i < kBlock; ++i) {
    out[2 + i] = static_cast<uint8_t>(static_cast<int8_t>(std::round(x[i] * id)));
  }
}

void QuantizeBlockQ4_0(const float* x, uint8_t* out) {
  float amax = 0, max = 0;
  for (int i = 0; i < kBlock; ++i) {
    if (std::fabs(x[i]) > amax) {
      amax = std::fabs(x[i]);
      max = x[i];
    }
  }
  const float d = max / -8.0f;
  const float id = d != 0 ? 1.0f / d : 0.0f;
  const uint16_t dh = F32ToF16(d);
  std::memcpy(out, &dh, 2);
  for (int i = 0; i < kBlock / 2; ++i) {
    const int lo = std::min(15, static_cast<int>(static_cast<int8_t>(x[i] * id + 8.5f)));
    const int hi = std::min(15, static_cast<int>(static_cast<int8_t>(x[i + 16] * id + 8.5f)));
    out[2 + i] = static_cast<uint8_t>(lo | (hi << 4));
  }
}

absl::Status CheckShape(const char* what, DType dtype, int64_t rows, int64_t cols) {
  if (dtype != DType::kQ8_0 && dtype != DType::kQ4_0) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": dtype ", DTypeName(dtype), " is not a block format (q8_0, q4_0)"));
  }
  if (rows < 0 || cols < 0 || cols % kBlock != 0) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", DTypeName(dtype), " rows of ", cols,
                                                   " weights; a row must be a multiple of ", kBlock,
                                                   " (one block)"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status QuantizeRows(DType dtype, const float* src, int64_t rows, int64_t cols, void* dst) {
  if (absl::Status s = CheckShape("quantize", dtype, rows, cols); !s.ok()) return s;
  const size_t block_bytes = DTypeRowBytes(dtype, kBlock);
  auto* out = static_cast<uint8_t*>(dst);
  const int64_t blocks = rows * (cols / kBlock);
  for (int64_t b = 0; b < blocks; ++b) {
    if (dtype == DType::kQ8_0) {
      QuantizeBlockQ8_0(src + b * kBlock, out + b * block_bytes);
    } else {
      QuantizeBlockQ4_0(src + b * kBlock, out + b * block_bytes);
    }
  }
  return absl::OkStatus();
}

absl::Status DequantizeRows(DType dtype, const void* src, int64_t rows, int64_t cols, float* dst) {
  if (absl::Status s = CheckShape("dequantize", dtype, rows, cols); !s.ok()) return s;
  const size_t block_bytes = DTypeRowBytes(dtype, kBlock);
  const auto* in = static_cast<const uint8_t*>(src);
  const int64_t blocks = rows * (cols / kBlock);
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* p = in + b * block_bytes;
    uint16_t dh;
    std::memcpy(&dh, p, 2);
    const float d = F16ToF32(dh);
    float* y = dst + b * kBlock;
    if (dtype == DType::kQ8_0) {
      for (int i = 0; i < kBlock; ++i) y[i] = d * static_cast<float>(static_cast<int8_t>(p[2 + i]));
    } else {
      for (int i = 0; i < kBlock / 2; ++i) {
        y[i] = d * static_cast<float>((p[2 + i] & 15) - 8);
        y[i + 16] = d * static_cast<float>((p[2 + i] >> 4) - 8);
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace saturn
