// The bf16 dot-product GEMM kernels (isa_kernels.h: SkinnyBf16Dot, BlockedBf16Dot): bf16
// weights against bf16-rounded input rows, f32 accumulation. Only called where
// DetectCpuFeatures().avx512_bf16.
//  - skinny, in one of two forms with the same sums (Bf16DotForm):
//    - dpbf16: vdpbf16ps, 32 products per instruction;
//    - split: each 32 bf16 pairs split into their odd and their even halves as f32 (an AND and
//      a shift) and two FMAs, odd first as vdpbf16ps adds them. Twice the instructions, but
//      faster on many rows where vdpbf16ps issues at half the FMA rate (docs/CPU.md). The
//      input rows come split once per GEMM (GemmArgs::x_split).
//    At M = 1 one weight row at a time in address order (gemm_skinny.inc's Stream), else eight
//    weight rows against two input rows per pass (4 x 4 tiles from four input rows on), like
//    gemm_skinny.inc.
//  - blocked: gemm_blocked.inc's Goto blocking, but the packed panels stay bf16 (half the
//    bytes packed, half the multiply instructions of the widening path). Panel layout: for
//    each pair of k (p2), the 32 weight rows' two values side by side,
//    wp[(p2 * 32 + r) * 2 + {0, 1}] = w[n0 + r][k0 + 2 p2 + {0, 1}], zero past the rows or k;
//    the matching input pair (x[i][k0 + 2 p2], x[i][k0 + 2 p2 + 1]) is one 32-bit broadcast.
#include "kernels/cpu/isa_kernels.h"

#if defined(__x86_64__) && defined(__GNUC__) && (defined(__clang__) || __GNUC__ >= 11)
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <vector>

#include "kernels/cpu/isa_target.h"

SATURN_TARGET_PUSH("avx512f,avx512bw,avx512vl,avx512bf16")

namespace saturn::cpu {
namespace {

#include "kernels/cpu/gemm/reduce16_avx512.inc"

inline __m512bh Load32(const uint16_t* p) { return (__m512bh)_mm512_loadu_si512(p); }

// The k tail (k % 32 elements) of row pair (x row, weight row), added to the vector's sum s.
inline float AddTail(float s, const uint16_t* xr, const uint16_t* wr, int64_t k32, int64_t k) {
  for (int64_t p = k32; p < k; ++p) s += Bf16ToF32(xr[p]) * Bf16ToF32(wr[p]);
  return s;
}
inline float Finish(__m512 acc, const uint16_t* xr, const uint16_t* wr, int64_t k32, int64_t k) {
  return AddTail(ReduceAddTree(acc), xr, wr, k32, k);
}

// The split form's halves of 32 bf16 pairs (as 16 32-bit lanes): the odd elements (each
// lane's high half) and the even ones (its low half moved up), exact as f32.
inline __m512 OddF32(__m512i v) {
  return _mm512_castsi512_ps(_mm512_and_si512(v, _mm512_set1_epi32(static_cast<int>(0xFFFF0000u))));
}
inline __m512 EvenF32(__m512i v) { return _mm512_castsi512_ps(_mm512_slli_epi32(v, 16)); }

// acc + the 32 products of pairs w and x (x_split's odd and even halves xo, xe), in
// vdpbf16ps's order: each lane adds its odd product, then its even one (both exact in f32).
inline __m512 DotSplit(__m512 acc, __m512i w, __m512 xo, __m512 xe) {
  return _mm512_fmadd_ps(xe, EvenF32(w), _mm512_fmadd_ps(xo, OddF32(w), acc));
}

// out rows [i, i + XR) x columns [j, j + WR), 32 products per vdpbf16ps (or per two FMAs in
// the split form).
template <int WR, int XR, bool kSplit>
inline void Block(const GemmArgs& a, int64_t i, int64_t j) {
  const uint16_t* w = static_cast<const uint16_t*>(a.w);
  const int64_t n = a.n, k = a.k, k32 = k & ~int64_t{31};
  const uint16_t* wr[WR];
#pragma GCC unroll 16
  for (int r = 0; r < WR; ++r) wr[r] = w + (j + r) * k;
  const uint16_t* xr[XR];
  const float* xs[XR];  // the split form's input rows (row stride k32)
#pragma GCC unroll 16
  for (int c = 0; c < XR; ++c) {
    xr[c] = a.x_bf16 + (i + c) * k;
    xs[c] = kSplit ? a.x_split + (i + c) * k32 : nullptr;
  }
  __m512 acc[XR][WR];
#pragma GCC unroll 16
  for (auto& row : acc) {
    for (__m512& v : row) v = _mm512_setzero_ps();
  }
  // Prefetch as gemm_skinny.inc does: the rows a.prefetch_blocks blocks ahead, one line per
  // row per step (32 bf16 = 64 bytes), once per block.
  const int64_t ahead = int64_t{a.prefetch_blocks} * 8;  // whole 8-row blocks, any WR
  const uint16_t* next = w + (j + ahead) * k;
  const bool prefetch = ahead > 0 && i == 0 && j + ahead + WR <= n;
  for (int64_t p = 0; p < k32; p += 32) {
    if (prefetch) {
#pragma GCC unroll 16
      for (int r = 0; r < WR; ++r) __builtin_prefetch(next + r * k + p, 0, 3);
    }
    if constexpr (kSplit) {
      __m512 xo[XR], xe[XR];
#pragma GCC unroll 16
      for (int c = 0; c < XR; ++c) {
        xo[c] = _mm512_loadu_ps(xs[c] + p);
        xe[c] = _mm512_loadu_ps(xs[c] + p + 16);
      }
#pragma GCC unroll 16
      for (int r = 0; r < WR; ++r) {
        const __m512i wv = _mm512_loadu_si512(wr[r] + p);
        const __m512 wo = OddF32(wv), we = EvenF32(wv);
#pragma GCC unroll 16
        for (int c = 0; c < XR; ++c) {
          acc[c][r] = _mm512_fmadd_ps(xe[c], we, _mm512_fmadd_ps(xo[c], wo, acc[c][r]));
        }
      }
    } else {
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
  }
  if constexpr (WR * XR == 16) {  // the 4 x 4 tiles: the 16 sums together, the same bits
    alignas(64) float sum[16];
    ReduceAdd16(&acc[0][0], sum);
#pragma GCC unroll 16
    for (int c = 0; c < XR; ++c) {
#pragma GCC unroll 16
      for (int r = 0; r < WR; ++r)
        a.out[(i + c) * n + j + r] = AddTail(sum[c * WR + r], xr[c], wr[r], k32, k);
    }
  } else {
#pragma GCC unroll 16
    for (int c = 0; c < XR; ++c) {
#pragma GCC unroll 16
      for (int r = 0; r < WR; ++r)
        a.out[(i + c) * n + j + r] = Finish(acc[c][r], xr[c], wr[r], k32, k);
    }
  }
}

// Rows the M = 1 stream runs side by side in one-chain mode: two for the split form (its chain
// holds two dependent FMAs per 32 products; two rows beat one and four, docs/CPU.md), one for
// vdpbf16ps (one sequential stream, which the prefetchers follow best).
template <bool kSplit>
constexpr int kStreamChains = kSplit ? 2 : 1;

// acc + the products of w and x at p: vdpbf16ps, or the split form's two FMAs.
template <bool kSplit>
inline __m512 Dot(__m512 acc, const uint16_t* w, const uint16_t* x, const float* xs, int64_t p) {
  if constexpr (kSplit) {
    return DotSplit(acc, _mm512_loadu_si512(w + p), _mm512_loadu_ps(xs + p),
                    _mm512_loadu_ps(xs + p + 16));
  } else {
    return _mm512_dpbf16_ps(acc, Load32(w + p), Load32(x + p));
  }
}

// M = 1: one weight row at a time in address order with a software prefetch
// a.prefetch_bytes ahead into L2, as gemm_skinny.inc's Stream (why there); 128 products per
// step.
template <bool kSplit>
void Stream(const GemmArgs& a, int64_t n_begin, int64_t n_end) {
  const uint16_t* w = static_cast<const uint16_t*>(a.w);
  const uint16_t* x = a.x_bf16;
  const float* xs = a.x_split;
  const int64_t k = a.k, k128 = k & ~int64_t{127}, k32 = k & ~int64_t{31};
  const int64_t ahead = a.prefetch_bytes / 2;
  int64_t j = n_begin;
  if (a.one_chain) {
    // kStreamChains rows side by side, each still one chain in Block's order: their chains
    // overlap, where one row at a time waits on its own.
    constexpr int R = kStreamChains<kSplit>;
    for (; j + R <= n_end; j += R) {
      const uint16_t* wr = w + j * k;
      __m512 acc[R];
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
      for (int64_t p = 0; p < k32; p += 32) {
        if (ahead > 0) {
#pragma GCC unroll 8
          for (int r = 0; r < R; ++r) __builtin_prefetch(wr + r * k + p + ahead, 0, 2);
        }
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) acc[r] = Dot<kSplit>(acc[r], wr + r * k, x, xs, p);
      }
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) a.out[j + r] = Finish(acc[r], x, wr + r * k, k32, k);
    }
  }
  for (; j < n_end; ++j) {
    const uint16_t* wr = w + j * k;
    __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(),
                     _mm512_setzero_ps()};
    int64_t p = 0;
    if (a.one_chain) {  // Block's order: one chain over k (see GemmArgs::one_chain)
      for (; p < k32; p += 32) {
        if (ahead > 0) __builtin_prefetch(wr + p + ahead, 0, 2);
        acc[0] = Dot<kSplit>(acc[0], wr, x, xs, p);
      }
      a.out[j] = Finish(acc[0], x, wr, k32, k);
      continue;
    }
    for (; p < k128; p += 128) {
      if (ahead > 0) {
#pragma GCC unroll 4
        for (int u = 0; u < 4; ++u) __builtin_prefetch(wr + p + 32 * u + ahead, 0, 2);
      }
#pragma GCC unroll 4
      for (int u = 0; u < 4; ++u) acc[u] = Dot<kSplit>(acc[u], wr, x, xs, p + 32 * u);
    }
    for (; p < k32; p += 32) acc[0] = Dot<kSplit>(acc[0], wr, x, xs, p);
    const __m512 sum = _mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), _mm512_add_ps(acc[2], acc[3]));
    a.out[j] = Finish(sum, x, wr, k32, k);
  }
}

// ---- blocked ----

constexpr int kNr = kBlockedPanel;  // 32 weight rows (out columns) per panel
constexpr int kMr = 12;             // input rows per micro tile: 24 accumulators
static_assert(kNr == 32, "the micro-kernel holds a panel as two 16-lane vectors");

// One panel of `rows` weight rows x kc of k from k0, in the pair layout above.
void PackPanel(const uint16_t* w, int64_t k, int64_t n0, int64_t rows, int64_t k0, int64_t kc,
               uint16_t* wp) {
  const int64_t pairs = (kc + 1) / 2;
  for (int64_t r = 0; r < kNr; ++r) {
    const uint16_t* src = r < rows ? w + (n0 + r) * k + k0 : nullptr;
    for (int64_t p2 = 0; p2 < pairs; ++p2) {
      const int64_t p = 2 * p2;
      wp[(p2 * kNr + r) * 2] = src != nullptr ? src[p] : 0;
      wp[(p2 * kNr + r) * 2 + 1] = src != nullptr && p + 1 < kc ? src[p + 1] : 0;
    }
  }
}

// The input pair at x + p as one 32-bit lane; `odd` when only x[p] exists (the k tail).
inline __m512i PairOf(const uint16_t* x, bool odd) {
  uint32_t v = x[0];
  if (!odd) std::memcpy(&v, x, 4);
  return _mm512_set1_epi32(static_cast<int>(v));
}

// One pair of k (p2): both panel vectors against each row's broadcast input pair; `odd`
// when only the pair's first k exists (its weight partner is zero-padded).
template <int MR>
inline void DotPair(__m512 (&acc)[MR][2], const uint16_t* x, int64_t ldx, const uint16_t* wp,
                    int64_t p2, bool odd) {
  const __m512bh w0 = Load32(wp + p2 * 2 * kNr), w1 = Load32(wp + p2 * 2 * kNr + kNr);
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r) {
    const __m512bh b = (__m512bh)PairOf(x + r * ldx + 2 * p2, odd);
    acc[r][0] = _mm512_dpbf16_ps(acc[r][0], b, w0);
    acc[r][1] = _mm512_dpbf16_ps(acc[r][1], b, w1);
  }
}

// out[0..MR) x [0..cols) (+)= x[0..MR) x [0..kc) * panel (pairs = ceil(kc / 2)).
template <int MR>
void Micro(const uint16_t* x, int64_t ldx, const uint16_t* wp, int64_t kc, float* out, int64_t ldo,
           bool accumulate, int cols) {
  __m512 acc[MR][2];
#pragma GCC unroll 16
  for (auto& row : acc) row[0] = row[1] = _mm512_setzero_ps();
  const int64_t full = kc / 2;  // pairs with both values
  for (int64_t p2 = 0; p2 < full; ++p2) DotPair<MR>(acc, x, ldx, wp, p2, false);
  if (kc % 2 != 0) DotPair<MR>(acc, x, ldx, wp, full, true);  // the last k alone
  const int c0 = cols < 16 ? cols : 16, c1 = cols - c0;
  const __mmask16 m0 = static_cast<__mmask16>((1u << c0) - 1);
  const __mmask16 m1 = static_cast<__mmask16>((1u << c1) - 1);
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r) {
    float* o = out + r * ldo;
    if (accumulate) {
      acc[r][0] = _mm512_add_ps(acc[r][0], _mm512_maskz_loadu_ps(m0, o));
      acc[r][1] = _mm512_add_ps(acc[r][1], _mm512_maskz_loadu_ps(m1, o + 16));
    }
    _mm512_mask_storeu_ps(o, m0, acc[r][0]);
    _mm512_mask_storeu_ps(o + 16, m1, acc[r][1]);
  }
}

template <int MR>
void MicroUpTo(int mr, const uint16_t* x, int64_t ldx, const uint16_t* wp, int64_t kc, float* out,
               int64_t ldo, bool accumulate, int cols) {
  if constexpr (MR > 1) {
    if (mr < MR) return MicroUpTo<MR - 1>(mr, x, ldx, wp, kc, out, ldo, accumulate, cols);
  }
  Micro<MR>(x, ldx, wp, kc, out, ldo, accumulate, cols);
}

// Many input rows: L2 panels x weight groups of 4 x 4 tiles, as gemm_skinny.inc's Tiled.
template <bool kSplit>
void Tiled(const GemmArgs& a, int64_t n_begin, int64_t n_end) {
  for (int64_t i0 = 0; i0 < a.m; i0 += a.panel_rows) {
    const int64_t i1 = a.m - i0 < a.panel_rows ? a.m : i0 + a.panel_rows;
    for (int64_t j0 = n_begin; j0 < n_end; j0 += a.group_rows) {
      const int64_t j1 = n_end - j0 < a.group_rows ? n_end : j0 + a.group_rows;
      int64_t i = i0;
      for (; i + 4 <= i1; i += 4) {
        int64_t j = j0;
        for (; j + 4 <= j1; j += 4) Block<4, 4, kSplit>(a, i, j);
        for (; j < j1; ++j) Block<1, 4, kSplit>(a, i, j);
      }
      for (; i < i1; ++i) {
        int64_t j = j0;
        for (; j + 4 <= j1; j += 4) Block<4, 1, kSplit>(a, i, j);
        for (; j < j1; ++j) Block<1, 1, kSplit>(a, i, j);
      }
    }
  }
}

template <bool kSplit>
void Skinny(const GemmArgs& a, int64_t n_begin, int64_t n_end) {
  const int64_t m = a.m;
  if (m == 1) return Stream<kSplit>(a, n_begin, n_end);
  if (a.panel_rows > 0) return Tiled<kSplit>(a, n_begin, n_end);
  int64_t j = n_begin;
  for (; j + 8 <= n_end; j += 8) {
    int64_t i = 0;
    for (; i + 4 <= m; i += 4) {  // 4 x 4 tiles from four input rows on, as gemm_skinny.inc
      Block<4, 4, kSplit>(a, i, j);
      Block<4, 4, kSplit>(a, i, j + 4);
    }
    for (; i + 2 <= m; i += 2) Block<8, 2, kSplit>(a, i, j);
    for (; i < m; ++i) Block<8, 1, kSplit>(a, i, j);
  }
  for (; j + 4 <= n_end; j += 4) {
    for (int64_t i = 0; i < m; ++i) Block<4, 1, kSplit>(a, i, j);
  }
  for (; j < n_end; ++j) {
    for (int64_t i = 0; i < m; ++i) Block<1, 1, kSplit>(a, i, j);
  }
}

// The time of `calls` SkinnyBf16DotAs calls on a 4 x 4-tile shape that sits in L1 (best of
// three), for MeasureForm.
double TimeForm(Bf16DotForm form, const GemmArgs& a, int calls) {
  double best = 1e30;
  for (int round = 0; round < 3; ++round) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int c = 0; c < calls; ++c) SkinnyBf16DotAs(form, a, 0, a.n);
    best = std::min(best,
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

// The faster form on this CPU: both timed on the same 8 x 16 x 512 GEMM, interleaved.
Bf16DotForm MeasureForm() {
  constexpr int64_t kM = 8, kN = 16, kK = 512;
  std::vector<uint16_t> x(kM * kK), w(kN * kK);
  for (size_t i = 0; i < x.size(); ++i)
    x[i] = F32ToBf16(0.25f + 0.001f * static_cast<float>(i % 97));
  for (size_t i = 0; i < w.size(); ++i)
    w[i] = F32ToBf16(0.5f - 0.002f * static_cast<float>(i % 89));
  std::vector<float> xs(kM * kK), out(kM * kN);
  SplitBf16Pairs(x.data(), kM, kK, xs.data());
  GemmArgs a;
  a.x_bf16 = x.data();
  a.x_split = xs.data();
  a.w = w.data();
  a.out = out.data();
  a.m = kM;
  a.n = kN;
  a.k = kK;
  a.prefetch_blocks = 0;
  a.one_chain = true;
  double dp = 1e30, split = 1e30;
  for (int round = 0; round < 3; ++round) {
    dp = std::min(dp, TimeForm(Bf16DotForm::kDpbf16, a, 200));
    split = std::min(split, TimeForm(Bf16DotForm::kSplit, a, 200));
  }
  return split < dp ? Bf16DotForm::kSplit : Bf16DotForm::kDpbf16;
}

}  // namespace

void SkinnyBf16DotAs(Bf16DotForm form, const GemmArgs& a, int64_t n_begin, int64_t n_end) {
  if (form == Bf16DotForm::kSplit) return Skinny<true>(a, n_begin, n_end);
  Skinny<false>(a, n_begin, n_end);
}

Bf16DotForm Bf16DotFormInUse() {
  static const Bf16DotForm form = MeasureForm();
  return form;
}

void SkinnyBf16Dot(const GemmArgs& a, int64_t n_begin, int64_t n_end) {
  SkinnyBf16DotAs(Bf16DotFormInUse(), a, n_begin, n_end);
}

void BlockedBf16Dot(const GemmArgs& a, int64_t n_begin, int64_t n_end, float* pack_space) {
  const uint16_t* w = static_cast<const uint16_t*>(a.w);
  uint16_t* pack = reinterpret_cast<uint16_t*>(pack_space);  // needs half the f32 scratch
  const int64_t m = a.m, n = a.n, k = a.k;
  for (int64_t nc0 = n_begin; nc0 < n_end; nc0 += kBlockedNc) {
    const int64_t ncount = n_end - nc0 < kBlockedNc ? n_end - nc0 : kBlockedNc;
    const int64_t panels = (ncount + kNr - 1) / kNr;
    for (int64_t k0 = 0; k0 < k; k0 += kBlockedKc) {
      const int64_t kc = k - k0 < kBlockedKc ? k - k0 : kBlockedKc;
      const int64_t panel_elems = (kc + 1) / 2 * 2 * kNr;
      for (int64_t j = 0; j < panels; ++j) {
        const int64_t rows = ncount - j * kNr < kNr ? ncount - j * kNr : kNr;
        PackPanel(w, k, nc0 + j * kNr, rows, k0, kc, pack + j * panel_elems);
      }
      for (int64_t i0 = 0; i0 < m; i0 += kMr) {
        const int mr = static_cast<int>(m - i0 < kMr ? m - i0 : kMr);
        for (int64_t j = 0; j < panels; ++j) {
          const int cols = static_cast<int>(ncount - j * kNr < kNr ? ncount - j * kNr : kNr);
          MicroUpTo<kMr>(mr, a.x_bf16 + i0 * k + k0, k, pack + j * panel_elems, kc,
                         a.out + i0 * n + nc0 + j * kNr, n, k0 > 0, cols);
        }
      }
    }
  }
}

}  // namespace saturn::cpu

SATURN_TARGET_POP

#else  // no compiler support: never selected (DetectCpuFeatures reports no avx512_bf16)
namespace saturn::cpu {
void SkinnyBf16DotAs(Bf16DotForm, const GemmArgs& a, int64_t n_begin, int64_t n_end) {
  KernelsFor(Isa::kScalar).skinny_bf16(a, n_begin, n_end);
}
Bf16DotForm Bf16DotFormInUse() { return Bf16DotForm::kDpbf16; }
void SkinnyBf16Dot(const GemmArgs& a, int64_t n_begin, int64_t n_end) {
  KernelsFor(Isa::kScalar).skinny_bf16(a, n_begin, n_end);
}
void BlockedBf16Dot(const GemmArgs& a, int64_t n_begin, int64_t n_end, float* pack) {
  KernelsFor(Isa::kScalar).blocked_bf16(a, n_begin, n_end, pack);
}
}  // namespace saturn::cpu
#endif

// Plain code, for either branch above (the split form's input rows).
namespace saturn::cpu {
void SplitBf16Pairs(const uint16_t* x_bf16, int64_t rows, int64_t k, float* x_split) {
  const int64_t k32 = k & ~int64_t{31};
  for (int64_t i = 0; i < rows; ++i) {
    const uint16_t* src = x_bf16 + i * k;
    float* dst = x_split + i * k32;
    for (int64_t p = 0; p < k32; p += 32) {
      for (int l = 0; l < 16; ++l) {
        dst[p + l] = Bf16ToF32(src[p + 2 * l + 1]);
        dst[p + 16 + l] = Bf16ToF32(src[p + 2 * l]);
      }
    }
  }
}
}  // namespace saturn::cpu
