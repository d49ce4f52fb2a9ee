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

}  // namespace saturn::cpu
