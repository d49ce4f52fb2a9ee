// The CPU backend's packed GEMM weight layouts (tensor.h), filled once as weights are
// uploaded. PackAmxTiles: bf16 AMX tiles (Layout::kAmxTiles). Each 32-row panel holds, for each
// 32-column block of k, the two B tiles GemmAmxTilesBf16 loads (rows 0-15, then 16-31): tile row p
// holds the 16 weight rows' pairs (k 2p, 2p + 1), the VNNI order TDPBF16PS reads.
#include "kernels/cpu/isa_kernels.h"
#include "kernels/half_float.h"
#include "kernels/tensor.h"

namespace saturn::cpu {

void PackAmxTiles(const float* src, int64_t rows, int64_t cols, int64_t p_begin, int64_t p_end,
                  uint16_t* dst) {
  constexpr int64_t kB = kPanelRows, kHalf = kB / 2;
  const int64_t kblocks = (cols + kB - 1) / kB;
  for (int64_t p = p_begin; p < p_end; ++p) {
    for (int64_t kb = 0; kb < kblocks; ++kb) {
      for (int64_t h = 0; h < 2; ++h) {
        uint16_t* tile = dst + ((p * kblocks + kb) * 2 + h) * kHalf * kB;
        for (int64_t r = 0; r < kHalf; ++r) {
          const int64_t row = p * kB + h * kHalf + r;
          for (int64_t c = 0; c < kB; ++c) {
            const int64_t k = kb * kB + c;
            tile[(c / 2) * kB + r * 2 + c % 2] =
                row < rows && k < cols ? F32ToBf16(src[row * cols + k]) : uint16_t{0};
          }
        }
      }
    }
  }
}

// PackPanels: f32 in 32-row panels (Layout::kPanels), each [cols][32], padding rows zero.
void PackPanels(const float* src, int64_t rows, int64_t cols, int64_t p_begin, int64_t p_end,
                float* dst) {
  constexpr int64_t kB = kPanelRows;
  for (int64_t p = p_begin; p < p_end; ++p) {
    float* panel = dst + p * kB * cols;
    for (int64_t r = 0; r < kB; ++r) {
      const int64_t row = p * kB + r;
      if (row >= rows) {
        for (int64_t c = 0; c < cols; ++c) panel[c * kB + r] = 0.0f;
        continue;
      }
      const float* s = src + row * cols;
      for (int64_t c = 0; c < cols; ++c) panel[c * kB + r] = s[c];
    }
  }
}

// PackQuantPanels: q8_0 / q4_0 rows in 32-row panels (Layout::kQuantPanels), block by block.
void PackQuantPanels(DType fmt, const uint8_t* src, int64_t rows, int64_t cols, int64_t p_begin,
                     int64_t p_end, uint8_t* dst) {
  constexpr int64_t kB = kPanelRows, kHalf = kB / 2;
  const bool q8 = fmt == DType::kQ8_0;
  const int64_t bb = q8 ? 34 : 18, blocks = cols / 32, row_bytes = blocks * bb;
  const int chunks = q8 ? 8 : 4;  // of four integer bytes a row
  for (int64_t p = p_begin; p < p_end; ++p) {
    for (int64_t b = 0; b < blocks; ++b) {
      uint8_t* out = dst + (p * blocks + b) * kB * bb;
      for (int64_t r = 0; r < kB; ++r) {
        const int64_t row = p * kB + r;
        const uint8_t* block = row < rows ? src + row * row_bytes + b * bb : nullptr;
        // The scale (zero for padding rows, whose integers then count for nothing).
        out[2 * r] = block != nullptr ? block[0] : 0;
        out[2 * r + 1] = block != nullptr ? block[1] : 0;
        for (int j = 0; j < chunks; ++j) {
          uint8_t* to = out + 2 * kB + (j * 2 + r / kHalf) * 64 + (r % kHalf) * 4;
          for (int t = 0; t < 4; ++t) {
            if (block == nullptr) {
              to[t] = q8 ? 128 : 0x88;
            } else {
              const uint8_t v = block[2 + 4 * j + t];
              to[t] = q8 ? static_cast<uint8_t>(v ^ 0x80) : v;  // int8 + 128 as unsigned
            }
          }
        }
      }
    }
  }
}

}  // namespace saturn::cpu
