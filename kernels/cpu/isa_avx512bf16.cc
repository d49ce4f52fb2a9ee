// The bf16 dot-product skinny GEMM (isa_kernels.h: SkinnyBf16Dot): bf16 weights against
// bf16-rounded input rows with vdpbf16ps (32 products per instruction, f32 accumulation).
// Eight weight rows against two input rows per pass, like gemm_skinny.inc. Only called where
// DetectCpuFeatures().avx512_bf16.
#include "kernels/cpu/isa_kernels.h"

#if defined(__x86_64__) && defined(__GNUC__) && (defined(__clang__) || __GNUC__ >= 11)
#include <immintrin.h>

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))), \
                             apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512bf16")
#endif

namespace saturn::cpu {
namespace {

inline float Bf16ToF32(uint16_t h) {
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  __builtin_memcpy(&f, &bits, 4);
  return f;
}

inline __m512bh Load32(const uint16_t* p) { return (__m512bh)_mm512_loadu_si512(p); }

inline float Finish(__m512 acc, const uint16_t* xr, const uint16_t* wr, int64_t k32, int64_t k) {
  float s = _mm512_reduce_add_ps(acc);
  for (int64_t p = k32; p < k; ++p) s += Bf16ToF32(xr[p]) * Bf16ToF32(wr[p]);
  return s;
}

// out rows [i, i + XR) x columns [j, j + WR), 32 products per vdpbf16ps.
template <int WR, int XR>
inline void Block(const SkinnyArgs& a, int64_t i, int64_t j) {
  const uint16_t* w = static_cast<const uint16_t*>(a.w);
  const int64_t n = a.n, k = a.k, k32 = k & ~int64_t{31};
  const uint16_t* wr[WR];
#pragma GCC unroll 16
  for (int r = 0; r < WR; ++r) wr[r] = w + (j + r) * k;
  const uint16_t* xr[XR];
#pragma GCC unroll 16
  for (int c = 0; c < XR; ++c) xr[c] = a.x_bf16 + (i + c) * k;
  __m512 acc[XR][WR];
#pragma GCC unroll 16
  for (auto& row : acc) {
    for (__m512& v : row) v = _mm512_setzero_ps();
  }
  // Prefetch as gemm_skinny.inc does: the rows a.prefetch_blocks blocks ahead, one line per
  // row per step (32 bf16 = 64 bytes), once per block.
  const int64_t ahead = int64_t{a.prefetch_blocks} * WR;
  const uint16_t* next = w + (j + ahead) * k;
  const bool prefetch = ahead > 0 && i == 0 && j + ahead + WR <= n;
  for (int64_t p = 0; p < k32; p += 32) {
    if (prefetch) {
#pragma GCC unroll 16
      for (int r = 0; r < WR; ++r) __builtin_prefetch(next + r * k + p, 0, 3);
    }
    __m512bh xv[XR];
#pragma GCC unroll 16
    for (int c = 0; c < XR; ++c) xv[c] = Load32(xr[c] + p);
#pragma GCC unroll 16
    for (int r = 0; r < WR; ++r) {
      const __m512bh wv = Load32(wr[r] + p);
#pragma GCC unroll 16
      for (int c = 0; c < XR; ++c) acc[c][r] = _mm512_dpbf16_ps(acc[c][r], wv, xv[c]);
    }
  }
#pragma GCC unroll 16
  for (int c = 0; c < XR; ++c) {
#pragma GCC unroll 16
    for (int r = 0; r < WR; ++r)
      a.out[(i + c) * n + j + r] = Finish(acc[c][r], xr[c], wr[r], k32, k);
  }
}

}  // namespace

void SkinnyBf16Dot(const SkinnyArgs& a, int64_t n_begin, int64_t n_end) {
  const int64_t m = a.m;
  int64_t j = n_begin;
  for (; j + 8 <= n_end; j += 8) {
    int64_t i = 0;
    for (; i + 2 <= m; i += 2) Block<8, 2>(a, i, j);
    for (; i < m; ++i) Block<8, 1>(a, i, j);
  }
  for (; j + 4 <= n_end; j += 4) {
    for (int64_t i = 0; i < m; ++i) Block<4, 1>(a, i, j);
  }
  for (; j < n_end; ++j) {
    for (int64_t i = 0; i < m; ++i) Block<1, 1>(a, i, j);
  }
}

}  // namespace saturn::cpu

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

#else  // no compiler support: never selected (DetectCpuFeatures reports no avx512_bf16)
namespace saturn::cpu {
void SkinnyBf16Dot(const SkinnyArgs& a, int64_t n_begin, int64_t n_end) {
  KernelsFor(Isa::kScalar).skinny_bf16(a, n_begin, n_end);
}
}  // namespace saturn::cpu
#endif
