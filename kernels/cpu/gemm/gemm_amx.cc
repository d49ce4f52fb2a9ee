// The AMX GEMMs (isa_kernels.h: GemmAmxBf16, GemmAmxStreamBf16, GemmAmxTilesBf16): bf16
// weights against bf16-rounded input rows with Intel AMX tiles (TDPBF16PS: a 16 x 16 f32 tile
// += 16 x 32 bf16 times 32 x 16 bf16, 8192 products per instruction). Only called where
// DetectCpuFeatures().amx_usable. The first two read row-major weights (as the M = 1 stream
// does), the third weights stored as tiles. Eight tile registers: four C (2 x 2), two A, two B.
//  - GemmAmxBf16 (many input rows): x is A, read straight from the caller's zero-padded copy
//    (AmxArgs::xp); each thread packs a block of 32-row weight panels (half its L2) by all of
//    k into VNNI B tiles (16 k-pairs x 16 weight rows x 2 bf16; a 16 x 16 transpose of 32-bit
//    pairs per 16 rows x 32 k), then runs each 32 input rows against every panel of the block
//    (the GotoBLAS order: the packed weights stay in L2, each weight is packed once, x is
//    read once per block). One panel against ~1 MiB blocks of x rows instead would repack
//    the weights per block of x, which ran slower at 256-2048 rows (docs/CPU.md).
//  - GemmAmxStreamBf16 (few input rows): the weights are A, 16 whole rows per tile straight
//    from memory; x is packed once per GEMM into B tiles (AmxPackX); each C tile holds the
//    transposed product and is transposed back as it is stored.
//  - GemmAmxTilesBf16 (any number of rows; weights uploaded as Layout::kAmxTiles, tensor.h):
//    GemmAmxBf16's order with the weights already in B tiles, so nothing is packed and each
//    thread's share of the weights is one sequential stream; it beat the skinny stream and
//    GemmAmxStreamBf16 on row-major weights at 1-16 rows (docs/CPU.md, AMX). Same bits as the
//    other two.
//  - Tile state is configured on entry and released on return, so a pool thread holds no
//    tile state (and the kernel saves none on a context switch) between GEMMs.
// Linux grants the tile data only after arch_prctl(ARCH_REQ_XCOMP_PERM) (cpu_features.cc).
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/isa_kernels.h"

#if defined(__x86_64__) && defined(__GNUC__) && (defined(__clang__) || __GNUC__ >= 11)
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "kernels/cpu/isa_target.h"

SATURN_TARGET_PUSH("avx512f,avx512bw,avx512vl,amx-tile,amx-bf16")

namespace saturn::cpu {
namespace {

constexpr int kTileRows = 16;
constexpr int kTileK = 32;                      // bf16 per A row: 64 bytes
constexpr int kTileElems = kTileRows * kTileK;  // bf16 per A or B tile: 1 KiB
// How far ahead GemmAmxTilesBf16's weight stream is prefetched into L2. Same rounds as above:
// 6.42 ms at 4 KiB, 6.39 at 8, 6.49 at 2, 6.62 with none; into L1 4 KiB ran 6.67.
constexpr int kAmxTilesPrefetch = 4096;

// The palette-1 configuration: every tile 64 bytes wide; B tiles (6, 7) 16 rows, A and C
// tiles (0-5) `m_rows` (16, or fewer where x has fewer rows: the products of zero rows are
// not computed; each output row's sums are the same either way).
struct alignas(64) TileConfig {
  uint8_t palette_id = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

void Configure(int m_rows = kTileRows) {
  TileConfig cfg;
  for (int t = 0; t < 8; ++t) {
    cfg.colsb[t] = 64;
    cfg.rows[t] = t < 6 ? m_rows : kTileRows;
  }
  _tile_loadconfig(&cfg);
}

// r[0..16) rows of 16 32-bit lanes -> their transpose in place: r[c] lane i = old r[i] lane c.
inline void Transpose16(__m512i (&r)[16]) {
  __m512i t[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
  // u[4i + j], 128-bit lane L: column 4L + j of rows 4i .. 4i + 3.
  __m512i u[16];
  for (int i = 0; i < 4; ++i) {
    u[4 * i] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
    u[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
    u[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
    u[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
  }
  // Column 4L + j = lane L of u[j], u[4 + j], u[8 + j], u[12 + j]: a 4 x 4 transpose of lanes.
  for (int j = 0; j < 4; ++j) {
    const __m512i v0 = _mm512_shuffle_i32x4(u[j], u[4 + j], 0x44);
    const __m512i v1 = _mm512_shuffle_i32x4(u[j], u[4 + j], 0xEE);
    const __m512i v2 = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], 0x44);
    const __m512i v3 = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], 0xEE);
    r[j] = _mm512_shuffle_i32x4(v0, v2, 0x88);
    r[4 + j] = _mm512_shuffle_i32x4(v0, v2, 0xDD);
    r[8 + j] = _mm512_shuffle_i32x4(v1, v3, 0x88);
    r[12 + j] = _mm512_shuffle_i32x4(v1, v3, 0xDD);
  }
}

// The B tiles of weight rows [n0, n0 + 16) (those below `rows` exist, the rest are zero) for
// every 32-wide block of k: tile kb at pack + kb * 2 * kTileElems, in the VNNI layout
// (row p: the 16 weight rows' pair (k0 + 2p, k0 + 2p + 1)). Past k, zeros.
// `ahead`: 16 rows (16 k elements, contiguous) the next panel reads, prefetched a 16th per
// block of k as this one is packed (nullptr: none), so the weight stream never waits on
// memory between panels (at a few input rows the kernel is a stream over the weights).
void PackHalf(const uint16_t* w, int64_t k, int64_t n0, int64_t rows, int64_t kblocks,
              uint16_t* pack, const uint16_t* ahead) {
  const int64_t ahead_elems = 16 * k;
  for (int64_t kb = 0; kb < kblocks; ++kb) {
    if (ahead != nullptr) {
      for (int64_t e = kb * kTileElems; e < (kb + 1) * kTileElems && e < ahead_elems; e += 32)
        __builtin_prefetch(ahead + e, 0, 3);
    }
    const int64_t k0 = kb * kTileK;
    const int64_t left = k - k0;
    const __mmask32 mask =
        left >= kTileK ? ~__mmask32{0} : static_cast<__mmask32>((uint32_t{1} << left) - 1);
    __m512i r[16];
    for (int i = 0; i < 16; ++i) {
      r[i] =
          i < rows ? _mm512_maskz_loadu_epi16(mask, w + (n0 + i) * k + k0) : _mm512_setzero_si512();
    }
    Transpose16(r);
    uint16_t* tile = pack + kb * 2 * kTileElems;
    for (int p = 0; p < 16; ++p) _mm512_storeu_si512(tile + p * 32, r[p]);
  }
}

// One C tile (held in tile register `tmm`, stored to `tmp` first unless it lies wholly
// inside out) to out rows [m0, m0 + 16) x columns [n0, n0 + 16), clipped to m and n_end.
inline void StoreClipped(const float* tmp, float* out, int64_t ldo, int64_t m0, int64_t m,
                         int64_t n0, int64_t n_end) {
  const int64_t rows = m - m0 < 16 ? m - m0 : 16;
  const int64_t cols = n_end - n0 < 16 ? n_end - n0 : 16;
  if (rows <= 0 || cols <= 0) return;
  const __mmask16 mask = static_cast<__mmask16>((1u << cols) - 1);
  for (int64_t i = 0; i < rows; ++i)
    _mm512_mask_storeu_ps(out + (m0 + i) * ldo + n0, mask, _mm512_loadu_ps(tmp + i * 16));
}

// Out rows [m0, m0 + 16) x columns [n0, n0 + 16) from a C tile of the transposed product
// (tmp[i][j] = out[m0 + j][n0 + i]), clipped to m and n_end.
inline void StoreTransposed(const float* tmp, float* out, int64_t ldo, int64_t m0, int64_t m,
                            int64_t n0, int64_t n_end) {
  const int64_t rows = m - m0 < 16 ? m - m0 : 16;
  const int64_t cols = n_end - n0 < 16 ? n_end - n0 : 16;
  if (rows <= 0 || cols <= 0) return;
  __m512i r[16];
  for (int i = 0; i < 16; ++i) r[i] = _mm512_load_si512(tmp + i * 16);
  Transpose16(r);
  const __mmask16 mask = static_cast<__mmask16>((1u << cols) - 1);
  for (int64_t j = 0; j < rows; ++j)
    _mm512_mask_storeu_ps(out + (m0 + j) * ldo + n0, mask, _mm512_castsi512_ps(r[j]));
}

// C tiles 0-3 (weight rows n0 + 16 j of tile j % 2, x rows m0 + 16 (j / 2), `tile_m` rows
// each) to out: whole tiles straight, edges through tmp. `wide`: tiles 1 and 3 hold weight
// rows; `two`: tiles 2 and 3 hold x rows.
inline void StoreTiles(const AmxArgs& a, int64_t m0, int tile_m, bool two, bool wide, int64_t n0,
                       int64_t n_end, int64_t ldo, float (&tmp)[4][16 * 16]) {
  const bool rows0 = m0 + tile_m <= a.m, rows1 = m0 + 32 <= a.m;
  const bool cols0 = n0 + 16 <= n_end, cols1 = n0 + 32 <= n_end;
  float* o = a.out + m0 * a.n + n0;
  if (rows0 && cols0) {
    _tile_stored(0, o, ldo);
  } else {
    _tile_stored(0, tmp[0], 64);
    StoreClipped(tmp[0], a.out, a.n, m0, a.m, n0, n_end);
  }
  if (wide) {
    if (rows0 && cols1) {
      _tile_stored(1, o + 16, ldo);
    } else {
      _tile_stored(1, tmp[1], 64);
      StoreClipped(tmp[1], a.out, a.n, m0, a.m, n0 + 16, n_end);
    }
  }
  if (!two) return;
  if (rows1 && cols0) {
    _tile_stored(2, o + 16 * a.n, ldo);
  } else {
    _tile_stored(2, tmp[2], 64);
    StoreClipped(tmp[2], a.out, a.n, m0 + 16, a.m, n0, n_end);
  }
  if (wide) {
    if (rows1 && cols1) {
      _tile_stored(3, o + 16 * a.n + 16, ldo);
    } else {
      _tile_stored(3, tmp[3], 64);
      StoreClipped(tmp[3], a.out, a.n, m0 + 16, a.m, n0 + 16, n_end);
    }
  }
}

// x's 32-row slices against the B-tile panels of weight rows [nb0, nb1) (`panels`: nb0's
// panel, the others after it), each output one chain of tile products over k. `stream_end`
// set: the panels come from memory, and the first slice prefetches kAmxTilesPrefetch bytes
// ahead of them into L2, short of stream_end.
void MultiplyBlock(const AmxArgs& a, const uint16_t* panels, int64_t nb0, int64_t nb1,
                   int64_t n_end, int tile_m, const char* stream_end) {
  const int64_t kblocks = a.kp / kTileK, ldx = a.kp * 2, ldo = a.n * 4;
  const int64_t panel_elems = kblocks * 2 * kTileElems;
  alignas(64) float tmp[4][16 * 16];
  for (int64_t m0 = 0; m0 < a.mp; m0 += 32) {
    const bool two = m0 + 32 <= a.mp;  // two A tiles (else the 16-row tail)
    const bool prefetch = stream_end != nullptr && m0 == 0;
    const uint16_t* x0 = a.xp + m0 * a.kp;
    const uint16_t* x1 = x0 + 16 * a.kp;
    for (int64_t n0 = nb0; n0 < nb1; n0 += kAmxPanel) {
      const uint16_t* panel = panels + (n0 - nb0) / kAmxPanel * panel_elems;
      const bool wide = n_end - n0 > 16;  // the second half holds weight rows
      _tile_zero(0);
      _tile_zero(1);
      _tile_zero(2);
      _tile_zero(3);
      for (int64_t kb = 0; kb < kblocks; ++kb) {
        const uint16_t* b = panel + kb * 2 * kTileElems;
        if (prefetch) {
          const char* ahead = reinterpret_cast<const char*>(b) + kAmxTilesPrefetch;
          for (int l = 0; l < 2 * kTileElems * 2 && ahead + l < stream_end; l += 64)
            _mm_prefetch(ahead + l, _MM_HINT_T1);
        }
        _tile_loadd(4, x0 + kb * kTileK, ldx);
        _tile_loadd(6, b, 64);
        _tile_loadd(7, b + kTileElems, 64);
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        if (two) {
          _tile_loadd(5, x1 + kb * kTileK, ldx);
          _tile_dpbf16ps(2, 5, 6);
          _tile_dpbf16ps(3, 5, 7);
        }
      }
      StoreTiles(a, m0, tile_m, two, wide, n0, n_end, ldo, tmp);
    }
  }
}

}  // namespace

void AmxPackX(const uint16_t* xp, int64_t kp, int64_t mb_begin, int64_t mb_end, uint16_t* xq) {
  const int64_t kblocks = kp / kTileK;
  for (int64_t mb = mb_begin; mb < mb_end; ++mb) {
    for (int64_t kb = 0; kb < kblocks; ++kb) {
      __m512i r[16];
      for (int i = 0; i < 16; ++i) r[i] = _mm512_loadu_si512(xp + (mb * 16 + i) * kp + kb * kTileK);
      Transpose16(r);
      uint16_t* tile = xq + (mb * kblocks + kb) * kTileElems;
      for (int p = 0; p < 16; ++p) _mm512_storeu_si512(tile + p * 32, r[p]);
    }
  }
}

void GemmAmxStreamBf16(const AmxArgs& a, int64_t n_begin, int64_t n_end, uint16_t* scratch) {
  const int64_t kblocks = a.kp / kTileK, mblocks = a.mp / 16;
  const bool whole_k = a.k == a.kp;  // weight rows are whole A-tile rows in memory
  alignas(64) float tmp[4][16 * 16];
  Configure();
  for (int64_t n0 = n_begin; n0 < n_end; n0 += kAmxPanel) {
    const int64_t rows = std::min<int64_t>(kAmxPanel, n_end - n0);
    // A tiles straight from the weights where the panel is 32 whole rows; else its rows
    // copied into zero-padded scratch (the part's last rows, or k not a multiple of 32).
    const uint16_t* w0 = a.w + n0 * a.k;
    int64_t ldw = a.k;
    if (!whole_k || rows < kAmxPanel) {
      for (int64_t r = 0; r < kAmxPanel; ++r) {
        uint16_t* dst = scratch + r * a.kp;
        const int64_t valid = r < rows ? a.k : 0;
        if (valid > 0) std::memcpy(dst, w0 + r * a.k, valid * sizeof(uint16_t));
        std::fill(dst + valid, dst + a.kp, uint16_t{0});
      }
      w0 = scratch;
      ldw = a.kp;
    }
    // The next panel (contiguous: 32 rows of k), prefetched into L2 over the first pass: into
    // L1 the panel, 64 k bytes (48 KiB at k = 768), evicts the one being read and holds the
    // core's fill buffers (docs/CPU.md, AMX: the L2 hint ran faster at one and two rows).
    const bool ahead = n0 + 2 * kAmxPanel <= n_end;
    const char* next =
        ahead ? reinterpret_cast<const char*>(a.w + (n0 + kAmxPanel) * a.k) : nullptr;
    const int64_t next_lines = kAmxPanel * a.k * 2 / 64, lines_per_kb = next_lines / kblocks + 1;
    const bool wide = rows > 16;
    for (int64_t mb = 0; mb < mblocks; mb += 2) {
      const bool two = mb + 1 < mblocks;  // two B tiles (32 input rows), else the tail
      const uint16_t* xb0 = a.xq + mb * kblocks * kTileElems;
      const uint16_t* xb1 = xb0 + kblocks * kTileElems;
      _tile_zero(0);
      _tile_zero(1);
      _tile_zero(2);
      _tile_zero(3);
      for (int64_t kb = 0; kb < kblocks; ++kb) {
        if (ahead && mb == 0) {
          for (int64_t l = kb * lines_per_kb; l < (kb + 1) * lines_per_kb && l < next_lines; ++l)
            __builtin_prefetch(next + l * 64, 0, 2);
        }
        _tile_loadd(4, w0 + kb * kTileK, ldw * 2);
        _tile_loadd(6, xb0 + kb * kTileElems, 64);
        _tile_dpbf16ps(0, 4, 6);
        if (wide) {
          _tile_loadd(5, w0 + 16 * ldw + kb * kTileK, ldw * 2);
          _tile_dpbf16ps(2, 5, 6);
        }
        if (two) {
          _tile_loadd(7, xb1 + kb * kTileElems, 64);
          _tile_dpbf16ps(1, 4, 7);
          if (wide) _tile_dpbf16ps(3, 5, 7);
        }
      }
      // C tile (i, j): weight rows n0 + 16 i, input rows 16 (mb + j): stored transposed.
      const int64_t m0 = mb * 16;
      _tile_stored(0, tmp[0], 64);
      StoreTransposed(tmp[0], a.out, a.n, m0, a.m, n0, n_end);
      if (wide) {
        _tile_stored(2, tmp[2], 64);
        StoreTransposed(tmp[2], a.out, a.n, m0, a.m, n0 + 16, n_end);
      }
      if (two) {
        _tile_stored(1, tmp[1], 64);
        StoreTransposed(tmp[1], a.out, a.n, m0 + 16, a.m, n0, n_end);
        if (wide) {
          _tile_stored(3, tmp[3], 64);
          StoreTransposed(tmp[3], a.out, a.n, m0 + 16, a.m, n0 + 16, n_end);
        }
      }
    }
  }
  _tile_release();
}

// Bytes of B tiles packed at a time: half the core's L2 (smaller blocks ran slower at 1024+
// rows of x, larger ones no faster: docs/CPU.md), 1 MiB where the L2 is unknown.
int64_t PackBlockBytes() {
  static const int64_t bytes = [] {
    const int64_t l2 = static_cast<int64_t>(CacheBytes(2));
    return l2 > 0 ? std::clamp<int64_t>(l2 / 2, 256 << 10, 2 << 20) : int64_t{1} << 20;
  }();
  return bytes;
}

// Weight panels packed per block: PackBlockBytes of B tiles, which stay in L2 while every
// 32-row slice of x (from L2 or L3, once per block) runs against them.
int64_t PanelsPerBlock(int64_t kp) {
  return std::max<int64_t>(1, PackBlockBytes() / (int64_t{kAmxPanel} * kp * 2));
}

size_t AmxPackElems(int64_t kp) {
  return static_cast<size_t>(PanelsPerBlock(kp) * (kp / kTileK) * 2 * kTileElems);
}

void GemmAmxBf16(const AmxArgs& a, int64_t n_begin, int64_t n_end, uint16_t* pack) {
  const int64_t kblocks = a.kp / kTileK;
  const int64_t panel_elems = kblocks * 2 * kTileElems;
  const int64_t block_cols = PanelsPerBlock(a.kp) * kAmxPanel;
  Configure();
  for (int64_t nb0 = n_begin; nb0 < n_end; nb0 += block_cols) {
    const int64_t nb1 = std::min(n_end, nb0 + block_cols);
    for (int64_t n0 = nb0; n0 < nb1; n0 += kAmxPanel) {
      const int64_t left = n_end - n0;
      uint16_t* panel = pack + (n0 - nb0) / kAmxPanel * panel_elems;
      // The next panel's two halves, where it has whole ones.
      const uint16_t* next = left >= 2 * kAmxPanel ? a.w + (n0 + kAmxPanel) * a.k : nullptr;
      PackHalf(a.w, a.k, n0, std::min<int64_t>(left, 16), kblocks, panel, next);
      PackHalf(a.w, a.k, n0 + 16, std::max<int64_t>(0, std::min<int64_t>(left - 16, 16)), kblocks,
               panel + kTileElems, next != nullptr ? next + 16 * a.k : nullptr);
    }
    MultiplyBlock(a, pack, nb0, nb1, n_end, kTileRows, nullptr);
  }
  _tile_release();
}

void GemmAmxTilesBf16(const AmxArgs& a, int64_t n_begin, int64_t n_end) {
  const int64_t panel_elems = a.kp / kTileK * 2 * kTileElems;
  const int64_t block_cols = PanelsPerBlock(a.kp) * kAmxPanel;
  // Under 16 rows of x, A and C tiles of just those rows.
  const int tile_m = a.m < kTileRows ? static_cast<int>(a.m) : kTileRows;
  // This thread's panels are contiguous: one sequential stream, prefetched up to its end.
  const char* stream_end =
      reinterpret_cast<const char*>(a.w + (n_end + kAmxPanel - 1) / kAmxPanel * panel_elems);
  Configure(tile_m);
  for (int64_t nb0 = n_begin; nb0 < n_end; nb0 += block_cols) {
    MultiplyBlock(a, a.w + nb0 / kAmxPanel * panel_elems, nb0, std::min(n_end, nb0 + block_cols),
                  n_end, tile_m, stream_end);
  }
  _tile_release();
}

}  // namespace saturn::cpu

SATURN_TARGET_POP

#else  // no compiler support: never selected (DetectCpuFeatures reports no amx_usable)
namespace saturn::cpu {
size_t AmxPackElems(int64_t kp) { return static_cast<size_t>(kp) * 32; }
void GemmAmxBf16(const AmxArgs&, int64_t, int64_t, uint16_t*) {}
void AmxPackX(const uint16_t*, int64_t, int64_t, int64_t, uint16_t*) {}
void GemmAmxStreamBf16(const AmxArgs&, int64_t, int64_t, uint16_t*) {}
void GemmAmxTilesBf16(const AmxArgs&, int64_t, int64_t) {}
}  // namespace saturn::cpu
#endif
