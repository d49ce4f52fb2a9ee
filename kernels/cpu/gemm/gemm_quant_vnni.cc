// GemmQuantPanelsVnni: q8_0 / q4_0 weights in Layout::kQuantPanels against x quantized to q8_0,
// with AVX512-VNNI's vpdpbusd (unsigned bytes times signed bytes, four products summed into
// each 32-bit lane). llama.cpp's CPU arithmetic for these formats (ggml_vec_dot_q8_0_q8_0,
// _q4_0_q8_0): per 32-column block the integer dot product of the weights' and x's integers,
// exact, times the weight block's scale and x's, summed over k in block order in f32.
//
// One zmm holds 16 weight rows' four bytes (a 64-byte chunk of the panel), one broadcast holds
// x's four bytes of the same columns: one vpdpbusd is 64 multiply-adds. The weights' integers
// are unsigned (q8_0 stored plus 128, q4_0 nibbles 0..15), so each block's integer sum carries
// 128 (or 8) times the sum of x's integers, which the accumulator starts without (xcorr).
//
// Each output is one chain over k in block order whatever the number of input rows, the
// thread or the panel: the GEMM is batch-invariant at every M.
#include <immintrin.h>

#include <algorithm>

#include "kernels/cpu/isa_kernels.h"
#include "kernels/cpu/isa_target.h"

namespace saturn::cpu {
namespace {

constexpr int64_t kXBlockBytes = 34;  // x's q8_0 blocks

SATURN_TARGET_PUSH("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,f16c,fma")

inline __m512i Bcast4(const uint8_t* p) {
  int32_t v;
  __builtin_memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}

// Panel rows [0, 32) against input rows [c0, c0 + C): acc[h][c] is rows 16h..16h+15 of input
// row c0 + c.
template <bool kQ8, int C>
inline void PanelTile(const QuantPanelArgs& a, const uint8_t* panel, int64_t c0, __m512 acc[2][C]) {
  const int64_t blocks = a.k / 32;
  const int64_t bb = kQ8 ? 34 : 18;
  const int64_t panel_block = 32 * bb;
  for (int c = 0; c < C; ++c) acc[0][c] = acc[1][c] = _mm512_setzero_ps();
  const __m512i low = _mm512_set1_epi8(15);
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* blk = panel + b * panel_block;
    if (a.prefetch_bytes > 0) {
      for (int64_t l = 0; l < panel_block; l += 64) {
        _mm_prefetch(reinterpret_cast<const char*>(blk + a.prefetch_bytes + l), _MM_HINT_T0);
      }
    }
    const __m512 s0 = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk)));
    const __m512 s1 =
        _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 32)));
    const uint8_t* q = blk + 64;
    for (int c = 0; c < C; ++c) {
      const uint8_t* xb = a.xq + (c0 + c) * blocks * kXBlockBytes + b * kXBlockBytes;
      const __m512i corr = _mm512_set1_epi32(a.xcorr[(c0 + c) * blocks + b]);
      __m512i i0 = corr, i1 = corr;
      if constexpr (kQ8) {
        for (int j = 0; j < 8; ++j) {
          const __m512i xv = Bcast4(xb + 2 + 4 * j);
          i0 = _mm512_dpbusd_epi32(i0, _mm512_loadu_si512(q + j * 128), xv);
          i1 = _mm512_dpbusd_epi32(i1, _mm512_loadu_si512(q + j * 128 + 64), xv);
        }
      } else {
        for (int j = 0; j < 4; ++j) {
          const __m512i xlo = Bcast4(xb + 2 + 4 * j), xhi = Bcast4(xb + 2 + 16 + 4 * j);
          const __m512i v0 = _mm512_loadu_si512(q + j * 128);
          const __m512i v1 = _mm512_loadu_si512(q + j * 128 + 64);
          i0 = _mm512_dpbusd_epi32(i0, _mm512_and_si512(v0, low), xlo);
          i1 = _mm512_dpbusd_epi32(i1, _mm512_and_si512(v1, low), xlo);
          i0 = _mm512_dpbusd_epi32(i0, _mm512_and_si512(_mm512_srli_epi16(v0, 4), low), xhi);
          i1 = _mm512_dpbusd_epi32(i1, _mm512_and_si512(_mm512_srli_epi16(v1, 4), low), xhi);
        }
      }
      uint16_t xd;
      __builtin_memcpy(&xd, xb, 2);
      const __m512 dx = _mm512_set1_ps(_cvtsh_ss(xd));
      acc[0][c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(i0), _mm512_mul_ps(s0, dx), acc[0][c]);
      acc[1][c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(i1), _mm512_mul_ps(s1, dx), acc[1][c]);
    }
  }
}

// Stores the tile's outputs for panel rows [r0, r0 + 32) that are below n (the part's columns).
template <int C>
inline void StoreTile(const QuantPanelArgs& a, int64_t r0, int64_t c0, __m512 acc[2][C]) {
  const int64_t valid = std::min<int64_t>(32, a.n - r0);
  const __mmask16 m0 = valid >= 16 ? 0xffff : static_cast<__mmask16>((1u << valid) - 1);
  const __mmask16 m1 =
      valid >= 32 ? 0xffff : static_cast<__mmask16>(valid > 16 ? (1u << (valid - 16)) - 1 : 0);
  for (int c = 0; c < C; ++c) {
    float* out = a.out + (c0 + c) * a.n + r0;
    _mm512_mask_storeu_ps(out, m0, acc[0][c]);
    _mm512_mask_storeu_ps(out + 16, m1, acc[1][c]);
  }
}

template <bool kQ8>
void Run(const QuantPanelArgs& a, int64_t n_begin, int64_t n_end) {
  constexpr int kC = 4;  // input rows a tile
  const int64_t panel_bytes = 32 * (a.k / 32) * (kQ8 ? 34 : 18);
  for (int64_t r0 = n_begin; r0 < n_end; r0 += 32) {
    const uint8_t* panel = a.w + (r0 / 32) * panel_bytes;
    int64_t c0 = 0;
    for (; c0 + kC <= a.m; c0 += kC) {
      __m512 acc[2][kC];
      PanelTile<kQ8, kC>(a, panel, c0, acc);
      StoreTile<kC>(a, r0, c0, acc);
    }
    for (; c0 < a.m; ++c0) {
      __m512 acc[2][1];
      PanelTile<kQ8, 1>(a, panel, c0, acc);
      StoreTile<1>(a, r0, c0, acc);
    }
  }
}

SATURN_TARGET_POP

}  // namespace

void GemmQuantPanelsVnni(const QuantPanelArgs& a, int64_t n_begin, int64_t n_end) {
  if (a.fmt == DType::kQ8_0) {
    Run<true>(a, n_begin, n_end);
  } else {
    Run<false>(a, n_begin, n_end);
  }
}

}  // namespace saturn::cpu
