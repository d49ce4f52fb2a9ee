// Batch invariance of the CPU GEMM (GemmPlanner::set_batch_invariant, the CPU backend's
// default): each input row's output bits do not depend on how many rows share the GEMM, on
// the pool's thread count, or on the fused-projection split, at every kernel level the CPU
// runs, with f32 and bf16 weights, at k with and without a tail. A request's logits then do
// not depend on what else runs in its step (tests/engine/batch_invariance_test.cc checks
// that end to end).
#include <algorithm>
#include <memory>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/gemm/gemm_planner.h"
#include "kernels/cpu/isa_kernels.h"
#include "kernels/cpu/ops.h"
#include "kernels/half_float.h"
#include "tests/kernels/cpu/cpu_test_util.h"

namespace saturn::testing {
namespace {

constexpr int kRows = 70;  // past the planner's 64-row probe and every tile's edge

TEST(CpuBatchInvarianceTest, EachRowsBitsDoNotDependOnTheBatch) {
  std::mt19937 rng(21);
  for (cpu::Isa isa : SupportedIsas()) {
    for (const char* dtype : {"f32", "bf16"}) {
      for (int k : {768, 129, 2048}) {  // 2048: past L1 for the block order (gemm.cc: SkinnyTiles)
        SCOPED_TRACE(absl::StrCat(cpu::IsaName(isa), " ", dtype, " k ", k));
        std::unique_ptr<Backend> b = MakeCpuIsa(2, isa, dtype);
        const DType wdt = std::string(dtype) == "bf16" ? DType::kBF16 : DType::kF32;
        const int n = 203;  // weight-row blocks plus a tail
        std::vector<float> x = Random(rng, size_t{kRows} * k), w = Random(rng, size_t{n} * k);
        DevTensor dw = Empty(*b, wdt, n, k);
        ASSERT_TRUE(b->UploadF32(w.data(), dw.t).ok());
        cpu::GemmPlanner planner;
        planner.set_batch_invariant(true);
        const cpu::IsaKernels& kernels = cpu::KernelsFor(isa);
        // Rows [first, first + m) as one GEMM on `threads` threads.
        auto run = [&](int first, int m, int threads) {
          cpu::ThreadPool pool(threads);
          std::vector<float> xs(x.begin() + size_t(first) * k, x.begin() + size_t(first + m) * k);
          DevTensor dx = F32(*b, m, k, xs), out = Poisoned(*b, m, n);
          EXPECT_TRUE(cpu::Gemm(pool, kernels, &planner, dx.t, dw.t, out.t).ok());
          return ToHost<float>(*b, out.t);
        };
        const std::vector<float> all = run(0, kRows, 2);
        for (int m : {1, 2, 3, 4, 5, 8, 13, 33, 64}) {
          for (int threads : {1, 3}) {
            const int first = kRows - m;  // the last rows: none of them at row 0 of `all`
            const std::vector<float> part = run(first, m, threads);
            ASSERT_TRUE(std::equal(part.begin(), part.end(), all.begin() + size_t(first) * n))
                << "rows " << first << ".." << kRows << " as M = " << m << " on " << threads
                << " threads differ from the same rows at M = " << kRows;
          }
        }
        // The fused projection's split (q, k, v from one GEMM) gives the same bits.
        {
          cpu::ThreadPool pool(2);
          DevTensor dx = F32(*b, kRows, k, x);
          DevTensor q = Poisoned(*b, kRows, 64), kv = Poisoned(*b, kRows, n - 64);
          const Tensor outs[] = {q.t, kv.t};
          ASSERT_TRUE(cpu::GemmSplit(pool, kernels, &planner, dx.t, dw.t, outs).ok());
          const std::vector<float> hq = ToHost<float>(*b, q.t), hkv = ToHost<float>(*b, kv.t);
          for (int i = 0; i < kRows; ++i) {
            ASSERT_TRUE(std::equal(hq.begin() + i * 64, hq.begin() + (i + 1) * 64,
                                   all.begin() + size_t(i) * n));
            ASSERT_TRUE(std::equal(hkv.begin() + i * (n - 64), hkv.begin() + (i + 1) * (n - 64),
                                   all.begin() + size_t(i) * n + 64));
          }
        }
        const bool amx = cpu::AmxRuns(isa, wdt);  // bf16 on AMX: the AMX kernels' chains
        EXPECT_TRUE(
            absl::StrContains(planner.Describe(), amx ? "(batch invariant: AMX tiles' chains)"
                                                      : "every M=skinny (batch invariant)"))
            << planner.Describe();
      }
    }
  }
}

// Many rows: the skinny kernel's L2 tiles (GemmArgs::panel_rows, k carried across chunks
// past kSkinnyChunk) give each output the bits of the block order and of M = 1's one chain,
// for every tile size, at every kernel level, f32 and bf16 weights (the vdpbf16ps kernel too
// where the CPU has it), k with a tail, n with a tail, on a thread split that cuts groups.
TEST(CpuBatchInvarianceTest, SkinnyTilesKeepEachOutputsChain) {
  std::mt19937 rng(33);
  const int m = 37, n = 45;
  using Kernel = void (*)(const cpu::GemmArgs&, int64_t, int64_t);
  for (cpu::Isa isa : SupportedIsas()) {
    const cpu::IsaKernels& kernels = cpu::KernelsFor(isa);
    std::vector<std::pair<std::string, Kernel>> variants = {{"f32", kernels.skinny_f32},
                                                            {"bf16", kernels.skinny_bf16}};
    if (isa == cpu::Isa::kAvx512 && cpu::DetectCpuFeatures().avx512_bf16) {
      variants.push_back({"bf16 dot vdpbf16ps", [](const cpu::GemmArgs& a, int64_t b, int64_t e) {
                            cpu::SkinnyBf16DotAs(cpu::Bf16DotForm::kDpbf16, a, b, e);
                          }});
      variants.push_back({"bf16 dot split", [](const cpu::GemmArgs& a, int64_t b, int64_t e) {
                            cpu::SkinnyBf16DotAs(cpu::Bf16DotForm::kSplit, a, b, e);
                          }});
    }
    for (const auto& [name, kernel] : variants) {
      for (int k : {129, 2 * int{cpu::kSkinnyChunk} + 35}) {
        SCOPED_TRACE(absl::StrCat(cpu::IsaName(isa), " ", name, " k ", k));
        const bool bf16 = name != "f32";
        std::vector<float> x = Random(rng, size_t{m} * k), wf = Random(rng, size_t{n} * k);
        std::vector<uint16_t> wb(wf.size()), xb(x.size());
        for (size_t i = 0; i < wf.size(); ++i) wb[i] = F32ToBf16(wf[i]);
        for (size_t i = 0; i < x.size(); ++i) {
          xb[i] = F32ToBf16(x[i]);
          if (bf16) x[i] = Bf16ToF32(xb[i]);  // what cpu::Gemm hands a bf16 kernel
        }
        const int64_t k32 = k & ~31;
        std::vector<float> xs(size_t(m) * k32);
        cpu::SplitBf16Pairs(xb.data(), m, k, xs.data());
        cpu::GemmArgs base;
        base.w = bf16 ? static_cast<const void*>(wb.data()) : wf.data();
        base.n = n;
        base.k = k;
        base.prefetch_blocks = 0;
        base.one_chain = true;
        auto run = [&](int first, int rows, int64_t panel, int64_t group) {
          cpu::GemmArgs a = base;
          a.x = x.data() + size_t(first) * k;
          a.x_bf16 = xb.data() + size_t(first) * k;
          a.x_split = xs.data() + size_t(first) * k32;
          a.m = rows;
          a.panel_rows = panel;
          a.group_rows = group;
          std::vector<float> out(size_t(rows) * n, -7.0f);
          a.out = out.data();
          kernel(a, 0, 19);  // two "threads": a cut inside a group
          kernel(a, 19, n);
          return out;
        };
        const std::vector<float> block = run(0, m, 0, 0);
        for (int i = 0; i < m; ++i) {
          const std::vector<float> one = run(i, 1, 0, 0);
          ASSERT_TRUE(std::equal(one.begin(), one.end(), block.begin() + size_t(i) * n))
              << "row " << i << " alone differs from the block order";
        }
        for (int64_t panel : {4, 8, 36}) {
          for (int64_t group : {int64_t{4}, int64_t{12}, cpu::kSkinnyMaxGroupRows}) {
            const std::vector<float> tiled = run(0, m, panel, group);
            ASSERT_EQ(tiled, block) << "panel " << panel << " group " << group;
          }
        }
      }
    }
  }
}

// The bf16 dot-product kernel's two forms (vdpbf16ps, and the split pairs' two FMAs) give
// the same bits for normal inputs at every M, tile and k tail, so the form a process measures
// as faster changes its speed, not its tokens.
TEST(CpuBatchInvarianceTest, Bf16DotFormsGiveTheSameBits) {
  if (!cpu::DetectCpuFeatures().avx512_bf16) {
    GTEST_SKIP() << "this CPU has no AVX512-BF16: the bf16 dot-product kernel never runs";
  }
  std::mt19937 rng(44);
  const int n = 45;
  for (int k : {32, 129, 768, 2 * int{cpu::kSkinnyChunk} + 35}) {
    for (int m : {1, 2, 5, 16, 37}) {
      SCOPED_TRACE(absl::StrCat("m ", m, " k ", k));
      const std::vector<float> xf = Random(rng, size_t(m) * k), wf = Random(rng, size_t(n) * k);
      std::vector<uint16_t> xb(xf.size()), wb(wf.size());
      for (size_t i = 0; i < xf.size(); ++i) xb[i] = F32ToBf16(xf[i]);
      for (size_t i = 0; i < wf.size(); ++i) wb[i] = F32ToBf16(wf[i]);
      const int64_t k32 = k & ~31;
      std::vector<float> xs(size_t(m) * k32);
      cpu::SplitBf16Pairs(xb.data(), m, k, xs.data());
      for (bool one_chain : {true, false}) {
        for (int64_t panel : {int64_t{0}, int64_t{8}}) {
          auto run = [&](cpu::Bf16DotForm form) {
            cpu::GemmArgs a;
            a.x_bf16 = xb.data();
            a.x_split = xs.data();
            a.w = wb.data();
            a.m = m;
            a.n = n;
            a.k = k;
            a.prefetch_blocks = 1;
            a.prefetch_bytes = 4096;
            a.one_chain = one_chain;
            a.panel_rows = panel;
            a.group_rows = panel > 0 ? 12 : 0;
            std::vector<float> out(size_t(m) * n, -7.0f);
            a.out = out.data();
            cpu::SkinnyBf16DotAs(form, a, 0, n);
            return out;
          };
          ASSERT_EQ(run(cpu::Bf16DotForm::kSplit), run(cpu::Bf16DotForm::kDpbf16))
              << "one_chain " << one_chain << " panel " << panel;
        }
      }
    }
  }
  const cpu::Bf16DotForm f = cpu::Bf16DotFormInUse();
  EXPECT_TRUE(f == cpu::Bf16DotForm::kSplit || f == cpu::Bf16DotForm::kDpbf16);
  EXPECT_EQ(cpu::Bf16DotFormInUse(), f) << "measured once: every GEMM of a process sums one way";
}

// x's rows [first, first + m) (x: rows of w.cols values) against w as one GEMM on `threads`
// threads through `path`, to the host.
std::vector<float> GemmOfRows(Backend& b, const cpu::IsaKernels& kernels,
                              const std::vector<float>& x, int first, int m, int threads,
                              cpu::GemmPath path, const Tensor& w) {
  const int64_t k = w.cols;
  cpu::ThreadPool pool(threads);
  std::vector<float> xs(x.begin() + first * k, x.begin() + (first + m) * k);
  DevTensor dx = F32(b, m, k, xs), out = Poisoned(b, m, w.rows);
  EXPECT_TRUE(cpu::Gemm(pool, kernels, nullptr, dx.t, w, out.t, path).ok());
  return ToHost<float>(b, out.t);
}

// A fused projection's split of x (the last rows of a kRows-row GEMM) against packed weights
// w into parts of 64/96/43 and 50/100/53 columns: parts on 32-row panels run in place, others
// through scratch; every part's rows must be the whole product's columns (`all`: kRows x n).
void ExpectSplitsAreTheWhole(Backend& b, const cpu::IsaKernels& kernels, const Tensor& x,
                             const Tensor& w, const std::vector<float>& all, int n) {
  cpu::ThreadPool pool(2);
  const int64_t m = x.rows, first = kRows - m;
  for (const std::vector<int>& sizes :
       {std::vector<int>{64, 96, 43}, std::vector<int>{50, 100, 53}}) {
    std::vector<DevTensor> outs;
    std::vector<Tensor> views;
    for (int c : sizes) outs.push_back(Poisoned(b, m, c));
    for (const DevTensor& o : outs) views.push_back(o.t);
    ASSERT_TRUE(cpu::GemmSplit(pool, kernels, nullptr, x, w, views).ok());
    int col = 0;
    for (size_t p = 0; p < sizes.size(); ++p) {
      const std::vector<float> got = ToHost<float>(b, views[p]);
      for (int64_t i = 0; i < m; ++i) {
        ASSERT_TRUE(std::equal(got.begin() + size_t(i) * sizes[p],
                               got.begin() + size_t(i + 1) * sizes[p],
                               all.begin() + size_t(first + i) * n + col))
            << "M " << m << " split " << sizes[0] << "/" << sizes[1] << "/" << sizes[2] << ": part "
            << p << " row " << i;
      }
      col += sizes[p];
    }
  }
}

// Where AMX runs, the batch-invariant planner gives bf16 weights the two AMX kernels (tiles of
// x against packed weights, and weight tiles streamed against packed x), the faster per M.
// Each output is one chain of tile products over k in k's order, so a row's bits must not
// depend on M, on its place in a 16-row tile, on the thread split or on which kernel ran.
TEST(CpuBatchInvarianceTest, AmxKernelsGiveEachRowTheSameBits) {
  if (!cpu::AmxRuns(cpu::Isa::kAvx512, DType::kBF16)) {
    GTEST_SKIP() << "AMX does not run here (" << cpu::DetectCpuFeatures().amx_note
                 << "): the batch-invariant planner keeps bf16 weights on the skinny kernel";
  }
  std::mt19937 rng(55);
  std::unique_ptr<Backend> b = MakeCpuIsa(2, cpu::Isa::kAvx512, "bf16");
  const cpu::IsaKernels& kernels = cpu::KernelsFor(cpu::Isa::kAvx512);
  for (int k : {768, 129, 2048}) {
    const int n = 203;  // 32-row panels plus a tail
    SCOPED_TRACE(absl::StrCat("k ", k));
    std::vector<float> x = Random(rng, size_t{kRows} * k), w = Random(rng, size_t{n} * k);
    DevTensor dw = Empty(*b, DType::kBF16, n, k);
    ASSERT_TRUE(b->UploadF32(w.data(), dw.t).ok());
    // The same weights in AMX tiles (the backend's batch-invariant upload), zero-padded to 224
    // rows and k to a multiple of 32.
    DevTensor dt = Empty(*b, DType::kBF16, n, k, Layout::kAmxTiles);
    ASSERT_TRUE(b->UploadF32(w.data(), dt.t).ok());
    auto run = [&](int first, int m, int threads, cpu::GemmPath path, const Tensor& wt) {
      return GemmOfRows(*b, kernels, x, first, m, threads, path, wt);
    };
    const std::vector<float> all = run(0, kRows, 2, cpu::GemmPath::kAmx, dw.t);
    for (cpu::GemmPath path :
         {cpu::GemmPath::kAmx, cpu::GemmPath::kAmxStream, cpu::GemmPath::kAuto}) {
      const bool tiles = path == cpu::GemmPath::kAuto;  // the tiles' only kernel
      for (int m : {1, 2, 5, 16, 17, 33, 64, kRows}) {
        for (int threads : {1, 3}) {
          const int first = kRows - m;  // rows at other places in their tiles than in `all`
          const std::vector<float> part = run(first, m, threads, path, tiles ? dt.t : dw.t);
          ASSERT_TRUE(std::equal(part.begin(), part.end(), all.begin() + size_t(first) * n))
              << (tiles ? "amx tiles" : cpu::GemmPathName(path)) << ": rows " << first << ".."
              << kRows << " as M = " << m << " on " << threads
              << " threads differ from the same rows at M = " << kRows;
        }
      }
    }
    // A fused projection's split over tiles.
    ExpectSplitsAreTheWhole(*b, kernels, F32(*b, kRows, k, x).t, dt.t, all, n);
  }
}

// f32 weights in 32-row panels (the CPU backend's upload at the AVX-512 level): every M runs
// the blocked kernel's loops on them, M = 1 as one stream. Each output sums one chain per 256
// columns of k, the chains added in k's order, so a row's bits must not depend on M or on the
// thread split, and must be the blocked path's on row-major weights, at every kernel level.
TEST(CpuBatchInvarianceTest, PanelsGiveEachRowTheBlockedPathsBits) {
  std::mt19937 rng(56);
  for (cpu::Isa isa : SupportedIsas()) {
    std::unique_ptr<Backend> b = MakeCpuIsa(2, isa, "f32", true, /*packed_weights=*/false);
    const cpu::IsaKernels& kernels = cpu::KernelsFor(isa);
    for (int k : {768, 129, 2048, 600}) {  // 600: two 256-column chains and a part one
      const int n = 203;                   // 32-row panels plus a tail
      SCOPED_TRACE(absl::StrCat(cpu::IsaName(isa), " k ", k));
      std::vector<float> x = Random(rng, size_t{kRows} * k), w = Random(rng, size_t{n} * k);
      DevTensor dw = Empty(*b, DType::kF32, n, k);
      ASSERT_TRUE(b->UploadF32(w.data(), dw.t).ok());
      // The same weights in panels (packed here: this backend keeps rows), padded to 224 rows.
      DevTensor dp = Empty(*b, DType::kF32, n, k, Layout::kPanels);
      cpu::PackPanels(w.data(), n, k, 0, PanelPadded(n) / kPanelRows, dp.t.as<float>());
      auto run = [&](int first, int m, int threads, cpu::GemmPath path, const Tensor& wt) {
        return GemmOfRows(*b, kernels, x, first, m, threads, path, wt);
      };
      const std::vector<float> all = run(0, kRows, 2, cpu::GemmPath::kBlocked, dw.t);
      // Close to the float64 product (the bits are the blocked path's own sums).
      for (int i = 0; i < kRows; i += 23) {
        for (int j = 0; j < n; j += 7) {
          double ref = 0, mag = 0;
          for (int p = 0; p < k; ++p) {
            ref += double(x[size_t(i) * k + p]) * w[size_t(j) * k + p];
            mag += std::abs(double(x[size_t(i) * k + p]) * w[size_t(j) * k + p]);
          }
          ASSERT_NEAR(all[size_t(i) * n + j], ref, 1e-5 * mag + 1e-6)
              << "row " << i << " col " << j;
        }
      }
      for (int m : {1, 2, 5, 12, 13, 33, 64, kRows}) {
        for (int threads : {1, 3}) {
          const int first = kRows - m;
          const std::vector<float> part = run(first, m, threads, cpu::GemmPath::kAuto, dp.t);
          ASSERT_TRUE(std::equal(part.begin(), part.end(), all.begin() + size_t(first) * n))
              << "panels: rows " << first << ".." << kRows << " as M = " << m << " on " << threads
              << " threads differ from the blocked path's at M = " << kRows;
        }
      }
      // A fused projection's split over panels, at one row and at many.
      for (int m : {1, kRows}) {
        DevTensor dx =
            F32(*b, m, k, std::vector<float>(x.begin() + size_t(kRows - m) * k, x.end()));
        ExpectSplitsAreTheWhole(*b, kernels, dx.t, dp.t, all, n);
      }
      cpu::ThreadPool pool(1);
      // Panels are read by the blocked path only.
      DevTensor dx = F32(*b, 1, k, std::vector<float>(x.begin(), x.begin() + k));
      DevTensor out = Poisoned(*b, 1, n);
      const absl::Status s =
          cpu::Gemm(pool, kernels, nullptr, dx.t, dp.t, out.t, cpu::GemmPath::kSkinny);
      EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
      EXPECT_TRUE(absl::StrContains(s.message(), "32-row panels")) << s;
    }
  }
}

// Attention with the invariant default: a generated position's row (at or past decode_from)
// gives the same bits decoded alone and recomputed inside a prompt chunk after a preemption,
// and a prompt row the same bits in chunks of any size, at every kernel level, over f32 and
// bf16 caches, for GQA groups of 1 to 4 heads (the row-at-a-time kernel for generated rows) and
// of 8 (lanes over rows everywhere).
TEST(CpuBatchInvarianceTest, AttentionRowIsTheSameDecodedRecomputedOrChunked) {
  std::mt19937 rng(34);
  // One sequence: a 40-token prompt, then generated tokens; rows at positions 30..44.
  constexpr int kBlock = 16, kCtx = 45, kPrompt = 40, kRows = 15, kHd = 64;
  for (cpu::Isa isa : SupportedIsas()) {
    for (DType kv : {DType::kF32, DType::kBF16}) {
      for (int group : {1, 2, 3, 4, 8}) {
        SCOPED_TRACE(absl::StrCat(cpu::IsaName(isa), " ", DTypeName(kv), " group ", group));
        std::unique_ptr<Backend> b = MakeCpuIsa(2, isa);
        const int kv_heads = 2, heads = kv_heads * group, width = kv_heads * kHd,
                  qwidth = heads * kHd, blocks = (kCtx + kBlock - 1) / kBlock;
        const std::vector<float> keys = Random(rng, size_t{blocks} * kBlock * width),
                                 values = Random(rng, size_t{blocks} * kBlock * width),
                                 q = Random(rng, size_t{kRows} * qwidth, -2, 2);
        auto cache = [&](const std::vector<float>& host) {
          if (kv == DType::kF32) return F32(*b, blocks * kBlock, width, host);
          std::vector<uint16_t> h(host.size());
          for (size_t i = 0; i < host.size(); ++i) h[i] = F32ToBf16(host[i]);
          return FromHost(*b, DType::kBF16, blocks * kBlock, width, h);
        };
        DevTensor kc = cache(keys), vc = cache(values);
        std::vector<int32_t> table(blocks);
        for (int i = 0; i < blocks; ++i) table[i] = blocks - 1 - i;  // not in order
        DevTensor tab = I32(*b, 1, blocks, table);
        const AttentionShape shape{heads, kv_heads, kHd, kBlock, 0.125f};
        constexpr int kFirst = kCtx - kRows;  // position of q's row 0
        // q's rows [first, first + len) as one chunk at their positions; prefill: known tokens.
        auto run = [&](int first, int len, uint8_t prefill) {
          std::vector<float> rows(q.begin() + size_t(first) * qwidth,
                                  q.begin() + size_t(first + len) * qwidth);
          DevTensor dq = F32(*b, len, qwidth, rows), out = Poisoned(*b, len, qwidth);
          const int end = kFirst + first + len;
          DevTensor qs = I32(*b, 1, 2, {0, len}), ctx = I32(*b, 1, 1, {end});
          AttentionBatch batch{qs.t, ctx.t, tab.t, 1, len, end, 0, 0};
          const int32_t decode_from = kPrompt;
          batch.prefill = &prefill;
          batch.decode_from = &decode_from;
          EXPECT_TRUE(b->Attention(dq.t, kc.t, vc.t, batch, shape, out.t).ok());
          return ToHost<float>(*b, out.t);
        };
        auto row_of = [&](const std::vector<float>& out, int i) {
          return std::vector<float>(out.begin() + size_t(i) * qwidth,
                                    out.begin() + size_t(i + 1) * qwidth);
        };
        // All 15 rows recomputed in one chunk (the prompt's last 10, then 5 generated).
        const std::vector<float> recomputed = run(0, kRows, 1);
        for (int i = kPrompt - kFirst; i < kRows; ++i) {
          ASSERT_EQ(run(i, 1, 0), row_of(recomputed, i))
              << "generated row " << i << ": decoded differs from recomputed";
        }
        // The prompt rows chunked 3 + 7: each row the same bits as in the one chunk.
        const std::vector<float> a = run(0, 3, 1), c = run(3, 7, 1);
        for (int i = 0; i < 10; ++i) {
          ASSERT_EQ(i < 3 ? row_of(a, i) : row_of(c, i - 3), row_of(recomputed, i))
              << "prompt row " << i << " differs between chunkings";
        }
      }
    }
  }
}

// Which layout the backend uploads GEMM weights in: AMX tiles for its bf16 weights where AMX
// runs, 32-row panels for its f32 weights at the AVX-512 level (batch-invariant or not: no
// row-major path is faster at any row count); rows otherwise. A packed layout it does not use
// is refused, naming it, and the tiles need the AMX kernel.
TEST(CpuBatchInvarianceTest, WeightsArePackedWhereAKernelReadsThem) {
  const bool amx = cpu::AmxRuns(cpu::BestIsa(), DType::kBF16);
  auto layout = [](const char* dtype, bool invariant, bool tiles, cpu::Isa isa) {
    std::unique_ptr<Backend> b = MakeCpuIsa(1, isa, dtype, invariant, tiles);
    return b->GemmWeightLayout(b->weight_dtype());
  };
  const cpu::Isa best = cpu::BestIsa();
  EXPECT_EQ(layout("bf16", true, true, best), amx ? Layout::kAmxTiles : Layout::kRows);
  EXPECT_EQ(layout("bf16", false, true, best), amx ? Layout::kAmxTiles : Layout::kRows);
  EXPECT_EQ(layout("bf16", true, false, best), Layout::kRows);
  const Layout f32 = best == cpu::Isa::kAvx512 ? Layout::kPanels : Layout::kRows;
  EXPECT_EQ(layout("f32", true, true, best), f32);
  EXPECT_EQ(layout("f32", false, true, best), f32);
  EXPECT_EQ(layout("f32", true, false, best), Layout::kRows);
  EXPECT_EQ(layout("bf16", true, true, cpu::Isa::kScalar), Layout::kRows);
  EXPECT_EQ(layout("f32", true, true, cpu::Isa::kScalar), Layout::kRows);

  // A backend that keeps rows refuses tiles, in its upload and in its GEMM.
  std::unique_ptr<Backend> rows = MakeCpuIsa(1, cpu::Isa::kScalar, "bf16");
  DevTensor w = Empty(*rows, DType::kBF16, 64, 64, Layout::kAmxTiles);
  const std::vector<float> host(64 * 64, 0.5f);
  const absl::Status up = rows->UploadF32(host.data(), w.t);
  EXPECT_EQ(up.code(), absl::StatusCode::kInvalidArgument) << up;
  EXPECT_TRUE(absl::StrContains(up.message(), "AMX tiles")) << up;
  DevTensor x = F32(*rows, 1, 64, std::vector<float>(64, 1.0f)), out = Poisoned(*rows, 1, 64);
  const absl::Status g = rows->Gemm(x.t, w.t, out.t);
  EXPECT_EQ(g.code(), absl::StatusCode::kInvalidArgument) << g;
  EXPECT_TRUE(absl::StrContains(g.message(), "AMX tiles")) << g;
  cpu::ThreadPool pool(1);
  const absl::Status direct = cpu::Gemm(pool, cpu::KernelsFor(cpu::Isa::kScalar), nullptr, x.t, w.t,
                                        out.t, cpu::GemmPath::kSkinny);
  EXPECT_FALSE(direct.ok());
  EXPECT_TRUE(absl::StrContains(direct.message(), "AMX tiles")) << direct;

  // And one that keeps f32 rows refuses panels.
  std::unique_ptr<Backend> f32_rows = MakeCpuIsa(1, cpu::Isa::kScalar, "f32");
  DevTensor p = Empty(*f32_rows, DType::kF32, 64, 64, Layout::kPanels);
  const absl::Status pup = f32_rows->UploadF32(host.data(), p.t);
  EXPECT_EQ(pup.code(), absl::StatusCode::kInvalidArgument) << pup;
  EXPECT_TRUE(absl::StrContains(pup.message(), "32-row panels")) << pup;
  const absl::Status pg = f32_rows->Gemm(x.t, p.t, out.t);
  EXPECT_EQ(pg.code(), absl::StatusCode::kInvalidArgument) << pg;
  EXPECT_TRUE(absl::StrContains(pg.message(), "32-row panels")) << pg;
}

// The backend is batch-invariant unless told otherwise, and says so where it is not.
TEST(CpuBatchInvarianceTest, TheBackendIsInvariantByDefault) {
  CpuBackendOptions o;
  o.num_threads = 1;
  o.weight_dtype = "f32";
  absl::StatusOr<std::unique_ptr<Backend>> on = CreateCpuBackend(o);
  ASSERT_TRUE(on.ok()) << on.status();
  EXPECT_FALSE(absl::StrContains((*on)->device_name(), "not batch-invariant"));
  o.batch_invariant = false;
  absl::StatusOr<std::unique_ptr<Backend>> off = CreateCpuBackend(o);
  ASSERT_TRUE(off.ok()) << off.status();
  EXPECT_TRUE(absl::StrContains((*off)->device_name(), "not batch-invariant"))
      << (*off)->device_name();
  // The factory's words: auto and on for the CPU, off, and a clear error for anything else.
  for (const char* v : {"auto", "on", "off"})
    EXPECT_TRUE(CreateBackend("cpu", 1, "f32", "auto", v).ok()) << v;
  const absl::Status bad = CreateBackend("cpu", 1, "f32", "auto", "yes").status();
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(bad.message(), "batch_invariant")) << bad;
}

}  // namespace
}  // namespace saturn::testing
