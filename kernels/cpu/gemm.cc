// GEMM on the CPU: out[M, N] = x[M, K] * w[N, K]^T, x and out f32, w f32 or bf16.
// Three paths:
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
// With bf16 weights every path multiplies x rounded to bf16 (the products are then exact in
// f32), so results do not depend on the path. kAuto asks the GemmPlanner, which measured
// the paths on this machine (gemm_planner.h).
#include <cblas.h>

#include <algorithm>
#include <array>
#include <vector>

#include "kernels/cpu/gemm_planner.h"
#include "kernels/cpu/ops.h"
#include "kernels/enum_table.h"
#include "kernels/half_float.h"

namespace saturn::cpu {
namespace {

SkinnyArgs ArgsOf(const Tensor& x, const Tensor& w, const Tensor& out) {
  SkinnyArgs a;
  a.x = x.as<float>();
  a.w = w.data;
  a.out = out.as<float>();
  a.m = x.rows;
  a.n = w.rows;
  a.k = x.cols;
  return a;
}

// x_bf16: x rounded to bf16, for the vdpbf16ps kernel (bf16 weights only).
// bf16 weights at the AVX-512 level on a CPU with AVX512-BF16: the vdpbf16ps kernels.
bool UseBf16Dot(const IsaKernels& kernels, const Tensor& w) {
  return w.dtype == DType::kBF16 && kernels.isa == Isa::kAvx512 && DetectCpuFeatures().avx512_bf16;
}

void Skinny(ThreadPool& pool, const IsaKernels& kernels, const Tensor& x, const uint16_t* x_bf16,
            const Tensor& w, const Tensor& out, int prefetch_blocks) {
  SkinnyArgs a = ArgsOf(x, w, out);
  a.prefetch_blocks = prefetch_blocks;
  auto kernel = w.dtype == DType::kF32 ? kernels.skinny_f32 : kernels.skinny_bf16;
  if (UseBf16Dot(kernels, w)) {
    a.x_bf16 = x_bf16;
    kernel = SkinnyBf16Dot;
  }
  // Chunks of whole 16-row groups (a multiple of every kernel's weight-row block); at
  // least ~64 KiB of f32 weights per chunk.
  const int64_t n = a.n, k = std::max<int64_t>(a.k, 1);
  const int64_t groups = (n + 15) / 16, grain = std::max<int64_t>(1, 16384 / (16 * k));
  pool.ParallelFor(groups, grain,
                   [&](int64_t b, int64_t e) { kernel(a, b * 16, std::min(n, e * 16)); });
}

void Blocked(ThreadPool& pool, const IsaKernels& kernels, const Tensor& x, const uint16_t* x_bf16,
             const Tensor& w, const Tensor& out) {
  SkinnyArgs a = ArgsOf(x, w, out);
  auto kernel = w.dtype == DType::kF32 ? kernels.blocked_f32 : kernels.blocked_bf16;
  if (UseBf16Dot(kernels, w)) {
    a.x_bf16 = x_bf16;
    kernel = BlockedBf16Dot;
  }
  const int64_t panels = (a.n + kBlockedPanel - 1) / kBlockedPanel;
  pool.ParallelFor(panels, 1, [&](int64_t b, int64_t e) {
    thread_local std::vector<float> pack;  // pool threads persist: allocated once each
    if (pack.size() < kBlockedPackFloats) pack.resize(kBlockedPackFloats);
    kernel(a, b * kBlockedPanel, std::min(a.n, e * kBlockedPanel), pack.data());
  });
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

}  // namespace

const char* GemmPathName(GemmPath path) {
  static constexpr std::array kNames{"auto", "skinny", "blocked", "blas"};  // GemmPath's order
  return EnumLookup(kNames, path, "?");
}

absl::Status Gemm(ThreadPool& pool, const IsaKernels& kernels, GemmPlanner* planner,
                  const Tensor& x, const Tensor& w, const Tensor& out, GemmPath path,
                  int prefetch_blocks) {
  for (auto [name, t] : {std::pair{"x", &x}, std::pair{"out", &out}}) {
    if (absl::Status s = ExpectF32(name, *t); !s.ok()) return s;
  }
  if (w.dtype != DType::kF32 && w.dtype != DType::kBF16) {
    return absl::UnimplementedError(absl::StrCat("w has dtype ", DTypeName(w.dtype),
                                                 "; the CPU backend's weights are f32 or bf16"));
  }
  if (w.rows == 0 || x.rows == 0) return absl::OkStatus();
  if (path == GemmPath::kAuto) {
    if (planner == nullptr) return absl::InternalError("gemm: kAuto needs a GemmPlanner");
    path = planner->Choose(pool, kernels, w, x.rows);
  }
  if (prefetch_blocks < 0) {
    prefetch_blocks = planner != nullptr ? planner->PrefetchBlocks(pool, kernels, w) : 1;
  }
  // bf16 weights: every path multiplies x rounded to bf16 (exact products, f32 sums), so
  // the result does not depend on which path the planner picked for this M.
  Tensor xin = x;
  const uint16_t* x_bf16 = nullptr;
  if (w.dtype == DType::kBF16) {
    thread_local std::vector<uint16_t> xb;
    thread_local std::vector<float> xr;
    const int64_t n = x.numel();
    if (static_cast<int64_t>(xb.size()) < n) xb.resize(n), xr.resize(n);
    // Plain pointers: inside the lambda, pool threads would see their own thread_locals.
    const float* src = x.as<float>();
    uint16_t* xbp = xb.data();
    float* xrp = xr.data();
    pool.ParallelFor(n, 1 << 14, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        xbp[i] = F32ToBf16(src[i]);
        xrp[i] = Bf16ToF32(xbp[i]);
      }
    });
    xin.data = xrp;
    x_bf16 = xbp;
  }
  switch (path) {
    case GemmPath::kSkinny:
      Skinny(pool, kernels, xin, x_bf16, w, out, prefetch_blocks);
      break;
    case GemmPath::kBlocked:
      Blocked(pool, kernels, xin, x_bf16, w, out);
      break;
    default:
      Blas(pool, xin, w, out);
      break;
  }
  return absl::OkStatus();
}

}  // namespace saturn::cpu
