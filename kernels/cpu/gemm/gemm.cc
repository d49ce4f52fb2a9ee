// GEMM on the CPU: out[M, N] = x[M, K] * w[N, K]^T, x and out f32, w f32, bf16, q8_0 or q4_0.
// q8_0 and q4_0 weights (llama.cpp's blocks, tensor.h) take one kernel at every M
// (gemm_quant.inc): the blocks widened in registers, each output one chain over k.
// Row-major weights take one of five paths (GemmPath), chosen per M:
//  - skinny: a weight-streaming kernel of our own (isa_kernels.h, per instruction-set
//    level): each weight row is read from memory once and multiplied against all M input
//    rows while it sits in L1, so a decode step costs one pass over the weights. bf16
//    weights use vdpbf16ps where the CPU has AVX512-BF16, else they are widened to f32 in
//    registers.
//  - blocked: a cache-blocked GEMM of our own (gemm_blocked.inc, per instruction-set level)
//    for many rows; bf16 weights are widened while packing, or, with AVX512-BF16, packed as
//    bf16 pairs for vdpbf16ps (isa_avx512bf16.cc).
//  - blas: OpenBLAS sgemm; bf16 weights are widened to f32 one panel of rows at a time
//    (N * K conversions against 2 * M * N * K FLOPs, so only for large M).
//  - amx, amx_stream: bf16 weights where the CPU has AMX and the OS grants it (gemm_amx.cc):
//    16 x 16 tiles; amx packs the weights into tiles per 32-row panel as they are used,
//    amx_stream reads them as tiles straight from memory and packs x instead.
// Weights uploaded packed take one kernel at every M, which packs nothing:
//  - bf16 in AMX tiles (Layout::kAmxTiles: the CPU backend's bf16 weights where AMX runs):
//    GemmAmxTilesBf16.
//  - f32 in 32-row panels (Layout::kPanels: the CPU backend's f32 weights at the AVX-512
//    level): the blocked kernel's loops on them (panels_f32), which sum as the blocked path
//    does.
// With bf16 weights every path multiplies x rounded to bf16 (the products are then exact in
// f32), but each path sums in its own order; a batch-invariant planner
// (GemmPlanner::set_batch_invariant, the CPU backend's default) keeps every M on the skinny
// path, whose per-row sums do not depend on M (bf16 weights where AMX runs: the two AMX
// kernels, which sum each output alike). kAuto asks the GemmPlanner, which measured
// the paths on this machine (gemm_planner.h). GemmSplit runs one GEMM whose output columns
// go to several tensors (q, k and v from the fused projection) as one dispatch: at batch 1
// each dispatch costs a few microseconds of thread hand-off, a tenth of a 0.4 MB bf16 GEMM.
#include <cblas.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <utility>
#include <vector>

#include "absl/types/span.h"
#include "kernels/base/enum_table.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/gemm/gemm_planner.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/stream_memory.h"
#include "kernels/half_float.h"
#include "kernels/quant_blocks.h"

namespace saturn::cpu {
namespace {

// The weight rows [row0, row0 + out.cols) of one GEMM, whose products go to `out`.
struct Part {
  int64_t row0;
  Tensor out;
};

// a for part p: its weight rows and its output (a.n = its rows, the output's row stride).
GemmArgs PartArgs(const Tensor& x, const Tensor& w, const Part& p) {
  GemmArgs a;
  a.x = x.as<float>();
  a.w = static_cast<const char*>(w.data) + p.row0 * DTypeRowBytes(w.dtype, w.cols);
  a.out = p.out.as<float>();
  a.m = x.rows;
  a.n = p.out.cols;
  a.k = x.cols;
  return a;
}

// One ParallelFor over the parts' units of `unit` weight rows, side by side: a chunk that
// spans parts calls fn(part, first row, end row) once for each part it covers.
template <typename Fn>
void ForUnits(ThreadPool& pool, absl::Span<const Part> parts, int64_t unit, int64_t grain, Fn fn) {
  std::vector<int64_t> first(parts.size() + 1, 0);  // each part's first unit
  for (size_t i = 0; i < parts.size(); ++i)
    first[i + 1] = first[i] + (parts[i].out.cols + unit - 1) / unit;
  pool.ParallelFor(first.back(), grain, [&](int64_t b, int64_t e) {
    for (size_t i = 0; i < parts.size(); ++i) {
      const int64_t lo = std::max(b, first[i]), hi = std::min(e, first[i + 1]);
      if (lo >= hi) continue;
      const int64_t n = parts[i].out.cols;
      fn(i, (lo - first[i]) * unit, std::min(n, (hi - first[i]) * unit));
    }
  });
}

// x_bf16: x rounded to bf16, for the vdpbf16ps kernel (bf16 weights only).
// bf16 weights at the AVX-512 level on a CPU with AVX512-BF16: the vdpbf16ps kernels.
bool UseBf16Dot(const IsaKernels& kernels, const Tensor& w) {
  return w.dtype == DType::kBF16 && kernels.isa == Isa::kAvx512 && DetectCpuFeatures().avx512_bf16;
}

// Each part's args; x_bf16 (and x_split) where the bf16 dot-product kernels run.
std::vector<GemmArgs> ArgsOfParts(const IsaKernels& kernels, const Tensor& x,
                                  const uint16_t* x_bf16, const float* x_split, const Tensor& w,
                                  absl::Span<const Part> parts) {
  const bool dot = UseBf16Dot(kernels, w);
  std::vector<GemmArgs> args;
  args.reserve(parts.size());
  for (const Part& p : parts) {
    args.push_back(PartArgs(x, w, p));
    args.back().x_bf16 = dot ? x_bf16 : nullptr;
    args.back().x_split = dot ? x_split : nullptr;
  }
  return args;
}

// The skinny kernel's L2 tiles for many input rows (GemmArgs::panel_rows): a panel of input
// rows in half of L2, a group of weight rows whose k chunk fills an eighth, both multiples of
// 4; {0, 0} (the block order) where x fits the panel and the block order's working set fits
// L1 (below). At 512 rows the tiles ran faster than both the block order and unchunked k
// (docs/CPU.md).
std::pair<int64_t, int64_t> SkinnyTiles(int64_t m, int64_t k, int64_t x_bytes, int64_t w_bytes) {
  static const int64_t l2 = [] {
    const size_t b = CacheBytes(2);
    return static_cast<int64_t>(b > 0 ? b : size_t{1} << 20);
  }();
  static const int64_t l1 = [] {
    const size_t b = CacheBytes(1);
    return static_cast<int64_t>(b > 0 ? b : size_t{32} << 10);
  }();
  k = std::max<int64_t>(k, 1);
  int64_t panel = std::max<int64_t>(4, l2 / 2 / (k * x_bytes) / 4 * 4);
  if (panel >= m) {
    // x fits half of L2. The block order keeps an 8-row weight block and four input rows in
    // L1 for the whole of k; where they outgrow it (k = 2048 f32: 96 KiB), one panel of all
    // the rows with k in chunks instead, which ran faster at 16 and 64 rows (docs/CPU.md).
    // Under four rows the tiles would be single rows: the block order's pairs stay.
    if (m < 4 || (8 * w_bytes + 4 * x_bytes) * k <= l1) return {0, 0};
    panel = (m + 3) / 4 * 4;
  }
  const int64_t chunk = std::min(k, kSkinnyChunk) * w_bytes;
  return {panel, std::clamp<int64_t>(l2 / 8 / chunk / 4 * 4, 4, kSkinnyMaxGroupRows)};
}

void Skinny(ThreadPool& pool, const IsaKernels& kernels, const Tensor& x, const uint16_t* x_bf16,
            const float* x_split, const Tensor& w, absl::Span<const Part> parts,
            int prefetch_blocks, int64_t prefetch_bytes, bool one_chain) {
  auto kernel = w.dtype == DType::kF32 ? kernels.skinny_f32 : kernels.skinny_bf16;
  const bool dot = UseBf16Dot(kernels, w);
  if (dot) kernel = SkinnyBf16Dot;
  const auto [panel_rows, group_rows] =
      SkinnyTiles(x.rows, x.cols, dot && x_split == nullptr ? 2 : 4,  // x_split: f32
                  static_cast<int64_t>(DTypeSize(w.dtype)));
  std::vector<GemmArgs> args = ArgsOfParts(kernels, x, x_bf16, x_split, w, parts);
  for (GemmArgs& a : args) {
    a.prefetch_blocks = prefetch_blocks;
    a.prefetch_bytes = prefetch_bytes;
    a.one_chain = one_chain;
    a.panel_rows = panel_rows;
    a.group_rows = group_rows;
  }
  // Chunks of whole 16-row groups (a multiple of every kernel's weight-row block); at
  // least ~64 KiB of f32 weights per chunk.
  const int64_t k = std::max<int64_t>(x.cols, 1);
  const int64_t grain = std::max<int64_t>(1, 16384 / (16 * k));
  ForUnits(pool, parts, 16, grain, [&](size_t i, int64_t b, int64_t e) { kernel(args[i], b, e); });
}

void Blocked(ThreadPool& pool, const IsaKernels& kernels, const Tensor& x, const uint16_t* x_bf16,
             const Tensor& w, absl::Span<const Part> parts) {
  auto kernel = w.dtype == DType::kF32 ? kernels.blocked_f32 : kernels.blocked_bf16;
  if (UseBf16Dot(kernels, w)) kernel = BlockedBf16Dot;
  const std::vector<GemmArgs> args = ArgsOfParts(kernels, x, x_bf16, nullptr, w, parts);
  ForUnits(pool, parts, kBlockedPanel, 1, [&](size_t i, int64_t b, int64_t e) {
    thread_local AlignedScratch<float> pack;  // pool threads persist: allocated once each
    kernel(args[i], b, e, pack.Get(kBlockedPackFloats));
  });
}

// x rounded to bf16 and zero-padded for the AMX kernel's A tiles: [m rounded up to 16, k
// rounded up to 32]; x's own rows only, then the AMX GEMM over the parts in 32-row panels.
// kAmxStream also packs that copy into B tiles (AmxPackX) for GemmAmxStreamBf16.
uint16_t* PaddedX(ThreadPool& pool, const Tensor& x, int64_t mp, int64_t kp) {
  const int64_t m = x.rows, k = x.cols;
  thread_local AlignedScratch<uint16_t> xpad;
  uint16_t* xp = xpad.Get(mp * kp);  // a plain pointer: pool threads see their own thread_locals
  const float* src = x.as<float>();
  pool.ParallelFor(mp, std::max<int64_t>(1, 16384 / kp), [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      uint16_t* row = xp + i * kp;
      const int64_t valid = i < m ? k : 0;
      for (int64_t j = 0; j < valid; ++j) row[j] = F32ToBf16(src[i * k + j]);
      std::fill(row + valid, row + kp, uint16_t{0});
    }
  });
  return xp;
}

// The AMX kernels' arguments for part p: x padded (xp), the part's weights from w_part.
AmxArgs AmxArgsFor(const Tensor& x, const uint16_t* xp, const uint16_t* w_part, const Part& p) {
  AmxArgs a;
  a.xp = xp;
  a.m = x.rows;
  a.mp = (x.rows + 15) / 16 * 16;
  a.k = x.cols;
  a.kp = (x.cols + 31) / 32 * 32;
  a.w = w_part;
  a.n = p.out.cols;
  a.out = p.out.as<float>();
  return a;
}

void Amx(ThreadPool& pool, const Tensor& x, const Tensor& w, absl::Span<const Part> parts,
         bool stream) {
  const int64_t m = x.rows, k = x.cols, mp = (m + 15) / 16 * 16, kp = (k + 31) / 32 * 32;
  uint16_t* xp = PaddedX(pool, x, mp, kp);
  uint16_t* xq = nullptr;
  if (stream) {
    thread_local AlignedScratch<uint16_t> xtiles;
    xq = xtiles.Get(mp * kp);
    pool.ParallelFor(mp / 16, std::max<int64_t>(1, 1024 / kp),
                     [&](int64_t b, int64_t e) { AmxPackX(xp, kp, b, e, xq); });
  }
  std::vector<AmxArgs> args;
  args.reserve(parts.size());
  for (const Part& p : parts) {
    args.push_back(AmxArgsFor(x, xp, w.as<uint16_t>() + p.row0 * k, p));
    args.back().xq = xq;
  }
  const size_t pack_elems = AmxPackElems(kp);
  ForUnits(pool, parts, kAmxPanel, 1, [&](size_t i, int64_t b, int64_t e) {
    thread_local AlignedScratch<uint16_t> pack;  // pool threads persist: grown once each
    if (stream) {
      GemmAmxStreamBf16(args[i], b, e, pack.Get(pack_elems));
    } else {
      GemmAmxBf16(args[i], b, e, pack.Get(pack_elems));
    }
  });
}

// Packed weights (Layout::kAmxTiles, kPanels): run(parts) on parts that each start on a
// 32-row panel, read from there. A part that does not (a GemmSplit whose sizes are not
// multiples of 32) cannot: then the whole product goes to scratch and each part's columns are
// copied out.
template <typename Run>
void OnPanels(const Tensor& x, const Tensor& w, absl::Span<const Part> parts, Run run) {
  if (std::all_of(parts.begin(), parts.end(),
                  [](const Part& p) { return p.row0 % kPanelRows == 0; })) {
    run(parts);
    return;
  }
  const int64_t m = x.rows;
  thread_local AlignedScratch<float> whole;
  float* wp = whole.Get(m * w.rows);
  const Part all{0, Tensor{wp, DType::kF32, m, w.rows}};
  run(absl::Span<const Part>(&all, 1));
  for (const Part& p : parts) {
    for (int64_t i = 0; i < m; ++i) {
      std::copy_n(wp + i * w.rows + p.row0, p.out.cols, p.out.as<float>() + i * p.out.cols);
    }
  }
}

// Weights in AMX tiles (Layout::kAmxTiles): every M runs GemmAmxTilesBf16.
void AmxTiles(ThreadPool& pool, const Tensor& x, const Tensor& w, absl::Span<const Part> parts) {
  const int64_t m = x.rows, k = x.cols, mp = (m + 15) / 16 * 16, kp = (k + 31) / 32 * 32;
  OnPanels(x, w, parts, [&](absl::Span<const Part> on) {
    const uint16_t* xp = PaddedX(pool, x, mp, kp);
    std::vector<AmxArgs> args;
    args.reserve(on.size());
    for (const Part& p : on) {  // the part's first panel: the tiles' row slice
      args.push_back(AmxArgsFor(x, xp, w.RowSlice(p.row0, p.out.cols).as<uint16_t>(), p));
    }
    ForUnits(pool, on, kAmxPanel, 1,
             [&](size_t i, int64_t b, int64_t e) { GemmAmxTilesBf16(args[i], b, e); });
  });
}

// f32 weights in panels (Layout::kPanels): every M runs the blocked kernel's order on them
// (IsaKernels::panels_f32), the weights prefetched kPanelsPrefetch bytes ahead: at M = 1 the
// distances from 2 to 8 KiB streamed alike, none clearly best (docs/CPU.md), so the distance
// is fixed, not tuned on served steps.
constexpr int64_t kPanelsPrefetch = 4096;
static_assert(kBlockedPanel == kPanelRows, "the blocked kernel's panels are Layout::kPanels'");

void Panels(ThreadPool& pool, const IsaKernels& kernels, const Tensor& x, const Tensor& w,
            absl::Span<const Part> parts) {
  OnPanels(x, w, parts, [&](absl::Span<const Part> on) {
    std::vector<GemmArgs> args;
    args.reserve(on.size());
    for (const Part& p : on) {  // a panel starts where its first row would in rows
      args.push_back(PartArgs(x, w, p));
      args.back().prefetch_bytes = kPanelsPrefetch;
    }
    ForUnits(pool, on, kBlockedPanel, 1,
             [&](size_t i, int64_t b, int64_t e) { kernels.panels_f32(args[i], b, e); });
  });
}

// q8_0 / q4_0 weights (row-major blocks): every M runs the quantized kernel
// (gemm_quant.inc), which reads each block once and widens it in registers, prefetching
// kQuantPrefetch bytes ahead of each weight row it streams.
constexpr int64_t kQuantPrefetch = 1024;

// q8_0 / q4_0 weights in Layout::kQuantPanels (AVX512-VNNI): x quantized to q8_0 once per
// GEMM (llama.cpp's activation format for these weights), then integer dot products per block.
// The weights are prefetched kQuantPanelsPrefetch bytes ahead: at M = 1 on the small preset
// (2 threads, Xeon), 4 to 16 KiB read faster than none, none clearly best (docs/CPU.md).
constexpr int64_t kQuantPanelsPrefetch = 8192;

void QuantPanels(ThreadPool& pool, const Tensor& x, const Tensor& w, absl::Span<const Part> parts) {
  const int64_t m = x.rows, k = x.cols, blocks = k / 32;
  const int32_t offset = w.dtype == DType::kQ8_0 ? 128 : 8;  // the weights' unsigned offset
  thread_local AlignedScratch<uint8_t> xq_scratch;
  thread_local AlignedScratch<int32_t> corr_scratch;
  uint8_t* xq = xq_scratch.Get(m * blocks * 34);
  int32_t* corr = corr_scratch.Get(m * blocks);
  pool.ParallelFor(m, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      // Cannot fail: q8_0 and k a multiple of 32, checked by GemmParts.
      (void)QuantizeRows(DType::kQ8_0, x.as<float>() + i * k, 1, k, xq + i * blocks * 34);
      for (int64_t j = 0; j < blocks; ++j) {
        const int8_t* q = reinterpret_cast<const int8_t*>(xq + (i * blocks + j) * 34 + 2);
        int32_t sum = 0;
        for (int t = 0; t < 32; ++t) sum += q[t];
        corr[i * blocks + j] = -offset * sum;
      }
    }
  });
  OnPanels(x, w, parts, [&](absl::Span<const Part> on) {
    std::vector<QuantPanelArgs> args;
    args.reserve(on.size());
    for (const Part& p : on) {
      QuantPanelArgs a;
      a.xq = xq;
      a.xcorr = corr;
      a.w = static_cast<const uint8_t*>(w.RowSlice(p.row0, p.out.cols).data);
      a.fmt = w.dtype;
      a.m = m;
      a.n = p.out.cols;
      a.k = k;
      a.out = p.out.as<float>();
      a.prefetch_bytes = kQuantPanelsPrefetch;
      args.push_back(a);
    }
    ForUnits(pool, on, kPanelRows, 1,
             [&](size_t i, int64_t b, int64_t e) { GemmQuantPanelsVnni(args[i], b, e); });
  });
}

void Quant(ThreadPool& pool, const IsaKernels& kernels, const Tensor& x, const Tensor& w,
           absl::Span<const Part> parts) {
  const auto kernel = w.dtype == DType::kQ8_0 ? kernels.quant_q8_0 : kernels.quant_q4_0;
  std::vector<GemmArgs> args;
  args.reserve(parts.size());
  for (const Part& p : parts) {
    args.push_back(PartArgs(x, w, p));
    args.back().prefetch_bytes = kQuantPrefetch;
  }
  // Chunks of whole 16-row units (a multiple of every level's tile rows), at least ~32 KiB of
  // weights each.
  const int64_t row_bytes =
      std::max<int64_t>(1, static_cast<int64_t>(DTypeRowBytes(w.dtype, w.cols)));
  const int64_t grain = std::max<int64_t>(1, 32768 / (16 * row_bytes));
  ForUnits(pool, parts, 16, grain, [&](size_t i, int64_t b, int64_t e) { kernel(args[i], b, e); });
}

void Blas(ThreadPool& pool, const Tensor& x, const Tensor& w, const Tensor& out) {
  pool.Park();  // OpenBLAS runs its own threads on these cores
  const blasint m = static_cast<blasint>(x.rows), n = static_cast<blasint>(w.rows),
                k = static_cast<blasint>(x.cols);
  if (w.dtype == DType::kF32) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, k, 1.0f, x.as<float>(), k,
                w.as<float>(), k, 0.0f, out.as<float>(), n);
    return;
  }
  // bf16 weights: widen ~1 MiB panels of rows and multiply each into its output columns.
  const int64_t panel = std::min<int64_t>(n, std::max<int64_t>(64, (1 << 18) / std::max(k, 1)));
  std::vector<float> wf(static_cast<size_t>(panel * k));
  const uint16_t* wb = w.as<uint16_t>();
  for (int64_t n0 = 0; n0 < n; n0 += panel) {
    const int64_t rows = std::min<int64_t>(panel, n - n0);
    pool.ParallelFor(rows * k, 1 << 14, [&](int64_t b, int64_t e) {
      const uint16_t* src = wb + n0 * k;
      for (int64_t i = b; i < e; ++i) wf[i] = Bf16ToF32(src[i]);
    });
    pool.Park();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, static_cast<blasint>(rows), k, 1.0f,
                x.as<float>(), k, wf.data(), k, 0.0f, out.as<float>() + n0, n);
  }
}

// Gemm and GemmSplit: x against w, its rows split into `parts`.
absl::Status GemmParts(ThreadPool& pool, const IsaKernels& kernels, GemmPlanner* planner,
                       const Tensor& x, const Tensor& w, absl::Span<const Part> parts,
                       GemmPath path, int prefetch_blocks, int64_t prefetch_bytes) {
  if (absl::Status s = ExpectF32("x", x); !s.ok()) return s;
  for (const Part& p : parts) {
    if (absl::Status s = ExpectF32("out", p.out); !s.ok()) return s;
  }
  if (IsBlockQuantized(w.dtype)) {
    const bool panels = w.layout == Layout::kQuantPanels;
    if ((w.layout != Layout::kRows && !panels) || w.cols % DTypeBlockElems(w.dtype) != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "gemm: w is ", w.ShapeString(), "; ", DTypeName(w.dtype),
          " weights are row-major rows of whole blocks of ", DTypeBlockElems(w.dtype)));
    }
    if (path != GemmPath::kAuto && path != GemmPath::kSkinny) {
      return absl::InvalidArgumentError(absl::StrCat("gemm: ", DTypeName(w.dtype),
                                                     " weights take only the quantized kernel, "
                                                     "not the ",
                                                     GemmPathName(path), " path"));
    }
    if (panels && (kernels.isa != Isa::kAvx512 || !DetectCpuFeatures().avx512_vnni)) {
      return absl::FailedPreconditionError(absl::StrCat("gemm: w is ", w.ShapeString(),
                                                        "; reading quantized panels needs the "
                                                        "avx512 kernel level (",
                                                        IsaName(kernels.isa), ") and AVX512-VNNI"));
    }
    if (w.rows == 0 || x.rows == 0) return absl::OkStatus();
    if (panels) {
      QuantPanels(pool, x, w, parts);
    } else {
      Quant(pool, kernels, x, w, parts);
    }
    return absl::OkStatus();
  }
  if (w.dtype != DType::kF32 && w.dtype != DType::kBF16) {
    return absl::UnimplementedError(
        absl::StrCat("w has dtype ", DTypeName(w.dtype),
                     "; the CPU backend's weights are f32, bf16, q8_0 or q4_0"));
  }
  if (w.rows == 0 || x.rows == 0) return absl::OkStatus();
  if (w.layout == Layout::kAmxTiles) {
    if (w.dtype != DType::kBF16 || !AmxRuns(kernels.isa, w.dtype)) {
      return absl::FailedPreconditionError(
          absl::StrCat("gemm: w is ", w.ShapeString(),
                       "; reading AMX tiles needs bf16, the avx512 kernel level (",
                       IsaName(kernels.isa), ") and AMX this process may use"));
    }
    if (path != GemmPath::kAuto && path != GemmPath::kAmx) {
      return absl::InvalidArgumentError(absl::StrCat("gemm: w is ", w.ShapeString(),
                                                     ", which only the AMX path reads, not ",
                                                     GemmPathName(path)));
    }
    AmxTiles(pool, x, w, parts);
    return absl::OkStatus();
  }
  if (w.layout == Layout::kPanels) {
    if (w.dtype != DType::kF32) {
      return absl::FailedPreconditionError(
          absl::StrCat("gemm: w is ", w.ShapeString(), "; 32-row panels hold f32 weights"));
    }
    if (path != GemmPath::kAuto && path != GemmPath::kBlocked) {
      return absl::InvalidArgumentError(absl::StrCat("gemm: w is ", w.ShapeString(),
                                                     ", which only the blocked path reads, not ",
                                                     GemmPathName(path)));
    }
    Panels(pool, kernels, x, w, parts);
    return absl::OkStatus();
  }
  if (path == GemmPath::kAuto) {
    if (planner == nullptr) return absl::InternalError("gemm: kAuto needs a GemmPlanner");
    path = planner->Choose(pool, kernels, w, x.rows);
  }
  if (IsAmx(path)) {
    if (!AmxRuns(kernels.isa, w.dtype)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "gemm: the AMX path needs bf16 weights (w is ", DTypeName(w.dtype),
          "), the avx512 kernel level (", IsaName(kernels.isa), ") and AMX this process may use (",
          DetectCpuFeatures().amx_bf16 ? DetectCpuFeatures().amx_note : "the CPU has none", ")"));
    }
    Amx(pool, x, w, parts, path == GemmPath::kAmxStream);
    return absl::OkStatus();
  }
  if (prefetch_blocks < 0) {
    prefetch_blocks = planner != nullptr ? planner->PrefetchBlocks(pool, kernels, w) : 1;
  }
  // A served M = 1 stream (the distance left to the planner) is timed for its tuner.
  const bool tuned_stream =
      planner != nullptr && prefetch_bytes < 0 && path == GemmPath::kSkinny && x.rows == 1;
  if (prefetch_bytes < 0) {
    prefetch_bytes = tuned_stream         ? planner->StreamPrefetchBytes(pool, kernels, w)
                     : planner != nullptr ? planner->PrefetchBytes(pool, kernels, w)
                                          : kDefaultPrefetchBytes;
  }
  // bf16 weights: every path multiplies x rounded to bf16 (exact products, f32 sums in the
  // path's own order).
  Tensor xin = x;
  const uint16_t* x_bf16 = nullptr;
  if (w.dtype == DType::kBF16) {
    thread_local AlignedScratch<uint16_t> xb;
    thread_local AlignedScratch<float> xr;
    const int64_t n = x.numel();
    // Plain pointers: inside the lambda, pool threads would see their own thread_locals.
    const float* src = x.as<float>();
    uint16_t* xbp = xb.Get(n);
    float* xrp = xr.Get(n);
    pool.ParallelFor(n, 1 << 14, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        xbp[i] = F32ToBf16(src[i]);
        xrp[i] = Bf16ToF32(xbp[i]);
      }
    });
    xin.data = xrp;
    x_bf16 = xbp;
  }
  // The split form of the bf16 dot-product kernel takes x's pairs split into f32 halves.
  const float* x_split = nullptr;
  if (path == GemmPath::kSkinny && UseBf16Dot(kernels, w) &&
      Bf16DotFormInUse() == Bf16DotForm::kSplit) {
    thread_local AlignedScratch<float> xs;
    const int64_t k = x.cols, k32 = k & ~int64_t{31};
    float* xsp = xs.Get(x.rows * k32);  // a plain pointer, as above
    pool.ParallelFor(
        x.rows, std::max<int64_t>(1, (1 << 14) / std::max<int64_t>(k, 1)),
        [&](int64_t b, int64_t e) { SplitBf16Pairs(x_bf16 + b * k, e - b, k, xsp + b * k32); });
    x_split = xsp;
  }
  switch (path) {
    case GemmPath::kSkinny: {
      const auto t0 = std::chrono::steady_clock::now();
      Skinny(pool, kernels, xin, x_bf16, x_split, w, parts, prefetch_blocks, prefetch_bytes,
             planner != nullptr && planner->batch_invariant());
      if (tuned_stream) {
        planner->RecordStream(
            w, prefetch_bytes,
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      }
      break;
    }
    case GemmPath::kBlocked:
      Blocked(pool, kernels, xin, x_bf16, w, parts);
      break;
    default:
      for (const Part& p : parts) Blas(pool, xin, w.RowSlice(p.row0, p.out.cols), p.out);
      break;
  }
  return absl::OkStatus();
}

}  // namespace

const char* GemmPathName(GemmPath path) {
  static constexpr std::array kNames{"auto", "skinny", "blocked",
                                     "blas", "amx",    "amx_stream"};  // GemmPath's order
  return EnumLookup(kNames, path, "?");
}

bool AmxRuns(Isa isa, DType w) {
  return w == DType::kBF16 && isa == Isa::kAvx512 && DetectCpuFeatures().amx_usable;
}

absl::Status Gemm(ThreadPool& pool, const IsaKernels& kernels, GemmPlanner* planner,
                  const Tensor& x, const Tensor& w, const Tensor& out, GemmPath path,
                  int prefetch_blocks, int64_t prefetch_bytes) {
  const Part whole{0, out};
  return GemmParts(pool, kernels, planner, x, w, absl::Span<const Part>(&whole, 1), path,
                   prefetch_blocks, prefetch_bytes);
}

absl::Status GemmSplit(ThreadPool& pool, const IsaKernels& kernels, GemmPlanner* planner,
                       const Tensor& x, const Tensor& w, absl::Span<const Tensor> outs,
                       GemmPath path) {
  std::vector<Part> parts;
  int64_t row = 0;
  for (const Tensor& o : outs) {
    parts.push_back(Part{row, o});
    row += o.cols;
  }
  if (row != w.rows) {
    return absl::InvalidArgumentError(
        absl::StrCat("gemm_split: outs' columns sum to ", row, " but w has ", w.rows, " rows"));
  }
  return GemmParts(pool, kernels, planner, x, w, parts, path, -1, -1);
}

}  // namespace saturn::cpu
