// The CPU kernels that exist once per instruction-set level (kernels/cpu/isa_*.cc, all built
// from the shared sources attention_tile.inc, gemm_skinny.inc, gemm_blocked.inc and
// simd16.inc) and the table
// that selects them at run time. Plain pointers and sizes only: callers (attention.cc,
// gemm.cc) validate and partition the work; these just compute.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cpu/cpu_features.h"
#include "kernels/half_float.h"  // before any target pragma: plain inline helpers
#include "kernels/tensor.h"

namespace saturn::cpu {

// One attention tile: up to kAttnTileRows (query row, head) pairs of one sequence that share
// a KV head, attended together so every key and value row is read once per tile.
constexpr int kAttnTileRows = 64;
// Tiles of at most this many pairs take the row-at-a-time kernel (lanes over keys) unless
// AttnTile::lanes_over_rows.
constexpr int kAttnFewRows = 4;
struct AttnTile {
  int rows = 0;                     // 1 .. kAttnTileRows
  const float* const* q = nullptr;  // [rows] query vectors, head_dim floats each
  float* const* out = nullptr;      // [rows] output vectors
  const int32_t* limit = nullptr;   // [rows] row i attends to positions [0, limit[i]), >= 1
  const int32_t* table = nullptr;   // the sequence's block table (validated by the caller)
  int block_size = 0;
  // k_cache / v_cache + the kv head's offset: f32, or bf16 where kv_bf16.
  const void* k_base = nullptr;
  const void* v_base = nullptr;
  bool kv_bf16 = false;
  int64_t row_stride = 0;  // elements per cache row
  int head_dim = 0;
  float scale = 1.0f;
  // The lanes-over-rows kernel whatever the tile's size (attention_tile.inc: tiles of a few
  // pairs otherwise take the row-at-a-time kernel, which sums in another order; each kernel's
  // result for a pair does not depend on the tile's other pairs). A batch-invariant Attention
  // (ops.h) sets it for prompt rows' tiles of any size, and for a generated position's tile
  // (its own GQA group, decoded or recomputed) where the group is wider than kAttnFewRows.
  bool lanes_over_rows = false;
};
// Floats of scratch one AttendTile call needs (the last term: a chunk of 16 keys' and values'
// rows widened from a bf16 cache).
inline size_t AttnTileScratchFloats(int head_dim) {
  const size_t hdp = (static_cast<size_t>(head_dim) + 15) / 16 * 16;
  return (head_dim + 16 + 4 + hdp) * kAttnTileRows + 64 + 2 * 16 * hdp;
}

// One GEMM part as the CPU GEMM kernels take it (skinny, blocked, panels, bf16 dot): each
// call computes out[m, n_begin:n_end) = x[m, K] * w[n, K]^T for the weight rows
// [n_begin, n_end) it is given.
struct GemmArgs {
  const float* x = nullptr;          // [m, k] f32
  const void* w = nullptr;           // [n, k] f32, bf16, q8_0 or q4_0
  const uint16_t* x_bf16 = nullptr;  // [m, k] x rounded to bf16 (bf16 dot-product kernel only)
  // [m, k & ~31] x_bf16 as f32, each 32 columns' odd ones then their even ones
  // (SplitBf16Pairs): the bf16 dot-product kernel's split form only.
  const float* x_split = nullptr;
  float* out = nullptr;  // [m, n]
  int64_t m = 0, n = 0, k = 0;
  // Software prefetch distance in weight-row blocks (0: none; 1: the next block), M > 1.
  int prefetch_blocks = 1;
  // M = 1 (one row at a time in address order): prefetch this many bytes ahead (0: none).
  int64_t prefetch_bytes = 0;
  // M = 1 sums each row in one accumulator chain, the order of the M > 1 blocks, so a row's
  // result does not depend on how many rows share the GEMM (batch invariance); off: four
  // chains, a little faster where the weights sit in cache.
  bool one_chain = false;
  // M > 1 with more input rows than L2 holds: input rows in panels of panel_rows, weight rows
  // in groups of group_rows (both sized by the caller to sit in L2 together), 4 x 4 tiles
  // inside; each output is still one chain over k, so the bits are those of the block order
  // (0: the block order, all input rows against each weight-row block).
  int64_t panel_rows = 0, group_rows = 0;
};
// Tiled's k chunk (columns) and the most weight rows a group may hold (its carried chains).
constexpr int64_t kSkinnyChunk = 1024, kSkinnyMaxGroupRows = 64;

// The cache-blocked GEMM (gemm_blocked.inc): weight rows are packed kBlockedNc x kBlockedKc
// at a time into kBlockedPanel-column panels; callers split n at multiples of kBlockedPanel
// and give each thread kBlockedPackFloats of scratch.
constexpr int kBlockedPanel = 32;
constexpr int64_t kBlockedKc = 256;
constexpr int64_t kBlockedNc = 512;
constexpr size_t kBlockedPackFloats = kBlockedKc * kBlockedNc;  // 512 KiB

struct IsaKernels {
  Isa isa;
  void (*attend_tile)(const AttnTile& tile, float* scratch);
  // o[0, n) = silu(g) * u elementwise (SwiGLU's one row).
  void (*swiglu_row)(const float* g, const float* u, float* o, int64_t n);
  void (*skinny_f32)(const GemmArgs& a, int64_t n_begin, int64_t n_end);
  // bf16 weights widened to f32 in registers; f32 x and accumulation.
  void (*skinny_bf16)(const GemmArgs& a, int64_t n_begin, int64_t n_end);
  // The blocked GEMM over out columns [n_begin, n_end) (n_begin a multiple of kBlockedPanel).
  void (*blocked_f32)(const GemmArgs& a, int64_t n_begin, int64_t n_end, float* pack);
  void (*blocked_bf16)(const GemmArgs& a, int64_t n_begin, int64_t n_end, float* pack);
  // f32 weights in 32-row panels (tensor.h: Layout::kPanels; a.w the part's first panel,
  // n_begin a multiple of kBlockedPanel): blocked_f32's order and sums with nothing packed, at
  // any m, the weights prefetched a.prefetch_bytes ahead (m = 1: two k blocks at a time).
  void (*panels_f32)(const GemmArgs& a, int64_t n_begin, int64_t n_end);
  // q8_0 / q4_0 weights (tensor.h), row-major blocks, k a multiple of 32 (gemm_quant.inc): every
  // M, each output one chain over k (batch-invariant); weights prefetched a.prefetch_bytes ahead.
  void (*quant_q8_0)(const GemmArgs& a, int64_t n_begin, int64_t n_end);
  void (*quant_q4_0)(const GemmArgs& a, int64_t n_begin, int64_t n_end);
};

// The kernels for `isa`, which the CPU must support (IsaSupported).
const IsaKernels& KernelsFor(Isa isa);

// bf16 weights and bf16-rounded x, f32 accumulation; only where
// DetectCpuFeatures().avx512_bf16. Two forms with the same sums: vdpbf16ps, or each bf16 pair
// split into f32 halves and two FMAs (odd, then even, as vdpbf16ps adds them). The bits agree
// wherever no input or partial sum is subnormal (vdpbf16ps flushes those to zero; FMAs keep
// them). Bf16DotFormInUse is the faster on this CPU, measured once per process, so every
// GEMM of a process sums one way (batch invariance). Needs a.x_bf16, and a.x_split for the
// split form.
enum class Bf16DotForm { kDpbf16, kSplit };
inline const char* Bf16DotFormName(Bf16DotForm f) {
  return f == Bf16DotForm::kSplit ? "split fma" : "vdpbf16ps";
}
Bf16DotForm Bf16DotFormInUse();
void SkinnyBf16Dot(const GemmArgs& a, int64_t n_begin, int64_t n_end);  // in the form in use
void SkinnyBf16DotAs(Bf16DotForm form, const GemmArgs& a, int64_t n_begin, int64_t n_end);
// x_split[rows, k & ~31] from x_bf16[rows, k] (GemmArgs::x_split).
void SplitBf16Pairs(const uint16_t* x_bf16, int64_t rows, int64_t k, float* x_split);
// The AMX GEMMs (gemm_amx.cc): bf16 weights against x rounded to bf16, in 16 x 16 f32 tiles;
// only where DetectCpuFeatures().amx_usable. Callers split n at multiples of kAmxPanel and
// give each thread AmxPackElems(kp) of scratch.
//  - GemmAmxBf16: x as the A operand (xp), each 32-row weight panel packed into B tiles as it
//    is used; for many input rows, over which the packing is spread.
//  - GemmAmxStreamBf16: the weights as the A operand straight from memory (no packing), x as
//    B tiles packed once per GEMM (xq, AmxPackX), each output tile transposed as it is
//    stored; for few input rows, where packing the weights would cost more than the products.
constexpr int kAmxPanel = 32;
struct AmxArgs {
  const uint16_t* xp = nullptr;  // x rounded to bf16, zero-padded to [mp, kp]
  const uint16_t* xq = nullptr;  // xp as B tiles (AmxPackX); GemmAmxStreamBf16 only
  int64_t m = 0;                 // x's rows (out's rows)
  int64_t mp = 0;                // m rounded up to 16
  int64_t kp = 0;                // k rounded up to 32
  const uint16_t* w = nullptr;   // [n, k] bf16, row-major
  int64_t n = 0, k = 0;          // n: out's columns (its row stride)
  float* out = nullptr;          // [m, n]
};
size_t AmxPackElems(int64_t kp);
void GemmAmxBf16(const AmxArgs& a, int64_t n_begin, int64_t n_end, uint16_t* pack);
// xq = xp's 16-row blocks [mb_begin, mb_end) as B tiles: tile (mb, kb) at
// xq + (mb * kp / 32 + kb) * 512, row p holding the 16 rows' pair (32 kb + 2p, 32 kb + 2p + 1).
void AmxPackX(const uint16_t* xp, int64_t kp, int64_t mb_begin, int64_t mb_end, uint16_t* xq);
void GemmAmxStreamBf16(const AmxArgs& a, int64_t n_begin, int64_t n_end, uint16_t* scratch);
// Weights already in AMX tiles (a.w: Layout::kAmxTiles, tensor.h, from the part's first
// panel; n_begin a multiple of kAmxPanel): GemmAmxBf16's order without packing; any m.
void GemmAmxTilesBf16(const AmxArgs& a, int64_t n_begin, int64_t n_end);
// src[rows, cols] f32, row-major -> dst in Layout::kAmxTiles (Tensor::bytes() of it), rounded
// to bf16 and zero-padded; panels [p_begin, p_end) of 32 rows. Portable: no AMX needed.
void PackAmxTiles(const float* src, int64_t rows, int64_t cols, int64_t p_begin, int64_t p_end,
                  uint16_t* dst);
// src[rows, cols] f32, row-major -> dst in Layout::kPanels (Tensor::bytes() of it),
// zero-padded; panels [p_begin, p_end) of 32 rows.
void PackPanels(const float* src, int64_t rows, int64_t cols, int64_t p_begin, int64_t p_end,
                float* dst);
// q8_0 / q4_0 weights in Layout::kQuantPanels against x quantized to q8_0 (gemm_quant_vnni.cc,
// AVX512-VNNI; llama.cpp's arithmetic: integer dot products per 32-column block, scaled by the
// two blocks' scales). Callers split n at multiples of kPanelRows.
struct QuantPanelArgs {
  const uint8_t* xq = nullptr;     // [m, k / 32] q8_0 blocks of x (QuantizeRows)
  const int32_t* xcorr = nullptr;  // [m, k / 32]: -(128 q8_0, 8 q4_0) x the block's integer sum
  const uint8_t* w = nullptr;      // the part's first panel
  DType fmt = DType::kQ8_0;
  int64_t m = 0, n = 0, k = 0;  // n: out's columns (its row stride)
  float* out = nullptr;         // [m, n]
  int64_t prefetch_bytes = 0;   // software prefetch this far ahead of each block (0: none)
};
void GemmQuantPanelsVnni(const QuantPanelArgs& a, int64_t n_begin, int64_t n_end);
// src: `rows` rows of q8_0 / q4_0 blocks (kRows) -> dst in Layout::kQuantPanels; panels
// [p_begin, p_end) of 32 rows, padding rows zero weights. Portable.
void PackQuantPanels(DType fmt, const uint8_t* src, int64_t rows, int64_t cols, int64_t p_begin,
                     int64_t p_end, uint8_t* dst);
// The blocked GEMM with the same arithmetic (isa_avx512bf16.cc): bf16 panels, needs
// a.x_bf16; same calling convention as IsaKernels::blocked_bf16.
void BlockedBf16Dot(const GemmArgs& a, int64_t n_begin, int64_t n_end, float* pack);

}  // namespace saturn::cpu
