// The fused CUDA kernel set (--cuda_kernels=fused) against the CPU twin (the GEMM against the
// baseline set too), with the launch records showing which kernel ran: the skinny GEMM
// (gemm_skinny.cu) at 1-16 rows, bf16 and f32 outputs, the fused projection's three outputs in
// one launch (odd widths), odd shapes that fall back to cuBLAS; split-K GQA decode attention
// (attention_decode_split.cu) at batch 1 (many splits, empty ones for short contexts), batch 64
// (two splits), groups of 1-8 and one past 8 (the baseline kernel's fallback), head_dim 32-256;
// SwiGLU in the skinny GEMM's epilogue against the GEMM then SwiGLU; the fused rope + KV write
// (rope_kv_write.cu) against CPU Rope then KvWrite, aligned and not, with Llama 3 scaling, and its
// skip of slots outside the cache; split greedy sampling against the CPU. Skips without a CUDA
// device. bench/gpu_check.sh runs it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "kernels/cuda/kernel_plan.h"
#include "kernels/cuda/ops.h"
#include "tests/kernels/cuda/cuda_test_util.h"
#include "tests/kernels/sampling_test_util.h"

namespace saturn::testing {
namespace {

std::unique_ptr<Backend> CudaFusedOrNull() {
  auto b = CreateBackend("cuda", 0, "auto", "auto", "auto", "fused");
  if (!b.ok()) return nullptr;
  return std::move(*b);
}

#define SATURN_REQUIRE_CUDA_FUSED(var)                        \
  std::unique_ptr<::saturn::Backend> var = CudaFusedOrNull(); \
  if (var == nullptr) GTEST_SKIP() << "no CUDA device: skipping"

std::unique_ptr<Backend> Cpu() {
  auto b = CreateBackend("cpu", 2, "f32");
  EXPECT_TRUE(b.ok()) << b.status();
  return b.ok() ? std::move(*b) : nullptr;
}

TEST(CudaFusedKernelsTest, TheBackendSaysWhichKernelsItRuns) {
  SATURN_REQUIRE_CUDA_FUSED(fused);
  EXPECT_TRUE(absl::StrContains(fused->device_name(), "fused kernels")) << fused->device_name();
  auto baseline = CreateBackend("cuda");
  ASSERT_TRUE(baseline.ok()) << baseline.status();
  EXPECT_FALSE(absl::StrContains((*baseline)->device_name(), "fused kernels"));
  // v1 and v2 name the two sets too.
  auto v1 = CreateBackend("cuda", 0, "auto", "auto", "auto", "v1");
  ASSERT_TRUE(v1.ok()) << v1.status();
  EXPECT_FALSE(absl::StrContains((*v1)->device_name(), "fused kernels"));
  auto v2 = CreateBackend("cuda", 0, "auto", "auto", "auto", "v2");
  ASSERT_TRUE(v2.ok()) << v2.status();
  EXPECT_TRUE(absl::StrContains((*v2)->device_name(), "fused kernels"));
  // batch_invariant wins: its fixed-order kernels, not the fused set's.
  auto inv = CreateBackend("cuda", 0, "auto", "auto", "on", "fused");
  ASSERT_TRUE(inv.ok()) << inv.status();
  EXPECT_FALSE(absl::StrContains((*inv)->device_name(), "fused kernels"));
  const absl::Status bad = CreateBackend("cuda", 0, "auto", "auto", "auto", "v3").status();
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(bad.message(), "cuda_kernels")) << bad;
}

struct GemmCase {
  int m, n, k;
};

// x [m, k] w [n, k] on the CPU, the baseline set and the fused one; the fused set must match
// the CPU as the baseline does.
TEST(CudaFusedKernelsTest, SkinnyGemmMatchesCpuAndBaseline) {
  SATURN_REQUIRE_CUDA_FUSED(fused);
  auto baseline_or = CreateBackend("cuda");
  ASSERT_TRUE(baseline_or.ok());
  std::unique_ptr<Backend> baseline = std::move(*baseline_or), cpu = Cpu();
  ASSERT_NE(cpu, nullptr);
  const GemmCase cases[] = {
      {1, 768, 768},    {1, 2048, 2048}, {2, 2304, 768}, {3, 768, 2048},
      {5, 203, 136},    {8, 4096, 768},  {13, 96, 64},   {16, 768, 2048},
      {16, 32000, 768}, {17, 64, 64},    {4, 50, 60}};  // 17 rows, k 60: cuBLAS
  for (const GemmCase& c : cases) {
    for (bool f32_out : {false, true}) {
      SCOPED_TRACE(absl::StrCat("m ", c.m, " n ", c.n, " k ", c.k, f32_out ? " f32 out" : ""));
      const auto x = RandomValues(size_t(c.m) * c.k, 31), w = RandomValues(size_t(c.n) * c.k, 32);
      std::vector<float> ref, got1, got2;
      for (Backend* b : {cpu.get(), baseline.get(), fused.get()}) {
        DevTensor dx = ComputeTensor(b, c.m, c.k, x), dw = ComputeTensor(b, c.n, c.k, w);
        const DType od = f32_out ? DType::kF32 : b->compute_dtype();
        DevTensor out = FloatTensor(b, od, c.m, c.n, {});
        Poison(b, out.t);
        gpu::RecordLaunch(gpu::KernelFamily::kGemmSkinny, nullptr, 0, 0, 0);
        const absl::Status st = b->Gemm(dx.t, dw.t, out.t);
        ASSERT_TRUE(st.ok()) << b->device_name() << ": " << st;
        if (b == fused.get()) {  // the skinny kernel ran where it applies, cuBLAS elsewhere
          const bool skinny = c.m <= gpu::kSkinnyMaxRows && (c.k * 2) % 16 == 0;
          EXPECT_EQ(gpu::LastLaunch(gpu::KernelFamily::kGemmSkinny).kernel != nullptr, skinny);
        }
        (b == cpu.get() ? ref : b == baseline.get() ? got1 : got2) = ReadFloats(b, out.t);
      }
      const double e1 = RelError(got1, ref), e2 = RelError(got2, ref);
      EXPECT_LT(e2, kBf16Tolerance) << "baseline's error " << e1;
      EXPECT_LT(e2, std::max(2.0 * e1, 1e-3)) << "fused is much further from the CPU than baseline";
    }
  }
}

// The fused projection (q, k, v side by side) in one launch equals the one-GEMM result.
TEST(CudaFusedKernelsTest, SkinnyGemmSplitFillsEachPart) {
  SATURN_REQUIRE_CUDA_FUSED(fused);
  std::unique_ptr<Backend> cpu = Cpu();
  ASSERT_NE(cpu, nullptr);
  for (int m : {1, 4, 16}) {
    // Odd part widths: a warp's column pair straddles two parts.
    const int k = 768, nq = 769, nk = 255, nv = 257, n = nq + nk + nv;
    const auto x = RandomValues(size_t(m) * k, 41), w = RandomValues(size_t(n) * k, 42);
    std::vector<float> ref, got;
    for (Backend* b : {cpu.get(), fused.get()}) {
      DevTensor dx = ComputeTensor(b, m, k, x), dw = ComputeTensor(b, n, k, w);
      DevTensor q = ComputeTensor(b, m, nq, {}), kk = ComputeTensor(b, m, nk, {}),
                v = ComputeTensor(b, m, nv, {});
      for (const DevTensor* t : {&q, &kk, &v}) Poison(b, t->t);
      const Tensor outs[] = {q.t, kk.t, v.t};
      gpu::RecordLaunch(gpu::KernelFamily::kGemmSkinny, nullptr, 0, 0, 0);
      const absl::Status st = b->GemmSplit(dx.t, dw.t, outs);
      ASSERT_TRUE(st.ok()) << st;
      if (b == fused.get()) {
        EXPECT_NE(gpu::LastLaunch(gpu::KernelFamily::kGemmSkinny).kernel, nullptr);
      }
      std::vector<float> all;
      for (const DevTensor* t : {&q, &kk, &v}) {
        const std::vector<float> part = ReadFloats(b, t->t);
        all.insert(all.end(), part.begin(), part.end());
      }
      (b == cpu.get() ? ref : got) = all;
    }
    EXPECT_LT(RelError(got, ref), kBf16Tolerance) << "m " << m;
  }
}

// SwiGLU in the skinny GEMM's epilogue (GemmSwiGlu on the fused set at 1-16 rows) gives the unfused
// skinny GEMM then SwiGLU to the bit, and the CPU within bf16; past 16 rows it stays two ops.
TEST(CudaFusedKernelsTest, SkinnyGemmSwiGluEqualsGemmThenSwiGlu) {
  SATURN_REQUIRE_CUDA_FUSED(fused);
  std::unique_ptr<Backend> cpu = Cpu();
  ASSERT_NE(cpu, nullptr);
  const GemmCase cases[] = {{1, 2 * 2048, 768},
                            {3, 2 * 5632, 2048},
                            {8, 2 * 101, 64},
                            {16, 2 * 2048, 768},
                            {17, 2 * 64, 64}};  // 17 rows: apart
  for (const GemmCase& c : cases) {
    SCOPED_TRACE(absl::StrCat("m ", c.m, " f ", c.n / 2, " k ", c.k));
    const int f = c.n / 2;
    const auto x = RandomValues(size_t(c.m) * c.k, 71), w = RandomValues(size_t(c.n) * c.k, 72);
    std::vector<float> ref, apart, in_epilogue;
    for (Backend* b : {cpu.get(), fused.get()}) {
      DevTensor dx = ComputeTensor(b, c.m, c.k, x), dw = ComputeTensor(b, c.n, c.k, w);
      DevTensor gate_up = ComputeTensor(b, c.m, c.n, {}), act = ComputeTensor(b, c.m, f, {});
      Poison(b, act.t);
      b->BeginStep(false);
      ASSERT_TRUE(b->GemmSwiGlu(dx.t, dw.t, gate_up.t, act.t).ok());
      auto timing = b->EndStep();
      ASSERT_TRUE(timing.ok()) << timing.status();
      if (b == cpu.get()) {
        ref = ReadFloats(b, act.t);
        continue;
      }
      const bool skinny = c.m <= gpu::kSkinnyMaxRows;
      EXPECT_EQ(fused->FusesGemmSwiGlu(dx.t, dw.t, act.t), skinny);
      ASSERT_EQ(timing->ops.size(), skinny ? 1u : 2u);
      EXPECT_EQ(timing->ops[0].kind, skinny ? OpKind::kGemmSwiGlu : OpKind::kGemm);
      in_epilogue = ReadFloats(b, act.t);
      Poison(b, act.t);
      ASSERT_TRUE(b->Gemm(dx.t, dw.t, gate_up.t).ok());
      ASSERT_TRUE(b->SwiGlu(gate_up.t, act.t).ok());
      apart = ReadFloats(b, act.t);
    }
    EXPECT_EQ(in_epilogue, apart);
    EXPECT_LT(RelError(in_epilogue, ref), kBf16Tolerance);
  }
}

struct RopeKvCase {
  int tokens, q_heads, kv_heads, head_dim;
  bool llama3;      // Llama 3.x frequency scaling
  bool misaligned;  // views one element into their buffers: the scalar kernel
};

// The fused rope + KV write gives CPU Rope then KvWrite's q and caches, as one op.
TEST(CudaFusedKernelsTest, FusedRopeKvWriteMatchesCpuRopeThenKvWrite) {
  SATURN_REQUIRE_CUDA_FUSED(fused);
  std::unique_ptr<Backend> cpu = Cpu();
  ASSERT_NE(cpu, nullptr);
  EXPECT_TRUE(fused->FusesRopeKvWrite());
  EXPECT_FALSE(cpu->FusesRopeKvWrite());
  const RopeKvCase cases[] = {{1, 12, 4, 64, false, false},  {5, 32, 8, 64, true, false},
                              {64, 12, 4, 64, false, false}, {3, 4, 4, 128, false, false},
                              {7, 4, 2, 32, true, true},     {2, 8, 8, 64, false, true}};
  for (const RopeKvCase& c : cases) {
    SCOPED_TRACE(absl::StrCat(c.tokens, " tokens, ", c.q_heads, "/", c.kv_heads, " heads of ",
                              c.head_dim, c.llama3 ? ", llama3" : "",
                              c.misaligned ? ", misaligned" : ""));
    const int qw = c.q_heads * c.head_dim, kw = c.kv_heads * c.head_dim;
    const int cache_rows = 4 * c.tokens + 8, shift = c.misaligned ? 1 : 0;
    const auto q = RandomValues(size_t(c.tokens) * qw + shift, 51),
               k = RandomValues(size_t(c.tokens) * kw + shift, 52),
               v = RandomValues(size_t(c.tokens) * kw + shift, 53),
               cache = RandomValues(size_t(cache_rows) * kw + shift, 54);
    std::vector<int32_t> pos(c.tokens), slots(c.tokens);
    for (int t = 0; t < c.tokens; ++t) {
      pos[t] = (t * 977 + 5) % 9000;      // past Llama 3's original 8192 positions too
      slots[t] = cache_rows - 1 - 3 * t;  // distinct, scattered, in range
    }
    RopeParams rope(500000.0f);
    if (c.llama3) rope.llama3_factor = 8.0f;
    std::vector<std::vector<float>> ref, got;
    for (Backend* b : {cpu.get(), fused.get()}) {
      DevTensor dq = ComputeTensor(b, 1, q.size(), q), dk = ComputeTensor(b, 1, k.size(), k),
                dv = ComputeTensor(b, 1, v.size(), v),
                kc = ComputeTensor(b, 1, cache.size(), cache),
                vc = ComputeTensor(b, 1, cache.size(), cache),
                dp = RawTensor(b, DType::kI32, 1, c.tokens, pos),
                ds = RawTensor(b, DType::kI32, 1, c.tokens, slots);
      const size_t off = shift * DTypeSize(b->compute_dtype());
      const Tensor tq = dq.buf.View(dq.t.dtype, c.tokens, qw, off),
                   tk = dk.buf.View(dk.t.dtype, c.tokens, kw, off),
                   tv = dv.buf.View(dv.t.dtype, c.tokens, kw, off),
                   tkc = kc.buf.View(kc.t.dtype, cache_rows, kw, off),
                   tvc = vc.buf.View(vc.t.dtype, cache_rows, kw, off);
      gpu::RecordLaunch(gpu::KernelFamily::kRopeKvWrite, nullptr, 0, 0, 0);
      b->BeginStep(false);
      ASSERT_TRUE(b->RopeKvWrite(tq, tk, tv, dp.t, c.head_dim, rope, ds.t, tkc, tvc).ok());
      auto timing = b->EndStep();
      ASSERT_TRUE(timing.ok()) << timing.status();
      if (b == fused.get()) {  // one op, one launch
        ASSERT_EQ(timing->ops.size(), 1u);
        EXPECT_EQ(timing->ops[0].kind, OpKind::kRopeKvWrite);
        EXPECT_EQ(gpu::LastLaunch(gpu::KernelFamily::kRopeKvWrite).grid_blocks, c.tokens);
      }
      (b == cpu.get() ? ref : got) = {ReadFloats(b, tq), ReadFloats(b, tkc), ReadFloats(b, tvc)};
    }
    // The written cache rows only (the rest is the untouched input, which would dilute).
    auto written = [&](const std::vector<float>& c) {
      std::vector<float> rows;
      for (int32_t slot : slots) {
        const auto first = c.begin() + shift + size_t(slot) * kw;
        rows.insert(rows.end(), first, first + kw);
      }
      return rows;
    };
    EXPECT_LT(RelError(got[0], ref[0]), kBf16Tolerance) << "q";
    EXPECT_LT(RelError(written(got[1]), written(ref[1])), kBf16Tolerance) << "k cache rows";
    EXPECT_EQ(got[2], ref[2]) << "v cache: a copy";
  }
}

// Slots that are negative (padding rows) or past the cache write no cache row, k's or v's, in
// either kernel (aligned: vectors; one element off: scalar); q is rotated all the same. The
// baseline set's Rope then KvWrite is the reference to the bit (the same rotation code), guard rows
// around the caches included.
TEST(CudaFusedKernelsTest, FusedRopeKvWriteSkipsSlotsOutsideTheCache) {
  SATURN_REQUIRE_CUDA_FUSED(fused);
  auto baseline_or = CreateBackend("cuda");
  ASSERT_TRUE(baseline_or.ok()) << baseline_or.status();
  std::unique_ptr<Backend> baseline = std::move(*baseline_or);
  const int tokens = 5, hd = 64, qw = 4 * hd, kw = 2 * hd, cache_rows = 16;
  const std::vector<int32_t> pos = {3, 900, 17, 4, 5},
                             slots = {5, -1, 9, cache_rows, std::numeric_limits<int32_t>::max()};
  for (int shift : {0, 1}) {
    SCOPED_TRACE(shift ? "misaligned (scalar kernel)" : "aligned (vector kernel)");
    const auto q = RandomValues(tokens * qw + shift, 61), k = RandomValues(tokens * kw + shift, 62),
               v = RandomValues(tokens * kw + shift, 63),
               cache = RandomValues((cache_rows + 2) * kw + shift, 64);
    std::vector<std::vector<float>> got[2];
    for (Backend* b : {baseline.get(), fused.get()}) {
      const size_t off = shift * DTypeSize(b->compute_dtype());
      const size_t row = kw * DTypeSize(b->compute_dtype());
      DevTensor dq = ComputeTensor(b, 1, q.size(), q), dk = ComputeTensor(b, 1, k.size(), k),
                dv = ComputeTensor(b, 1, v.size(), v),
                kc = ComputeTensor(b, 1, cache.size(), cache),
                vc = ComputeTensor(b, 1, cache.size(), cache),
                dp = RawTensor(b, DType::kI32, 1, tokens, pos),
                ds = RawTensor(b, DType::kI32, 1, tokens, slots);
      const DType dt = b->compute_dtype();
      const Tensor tq = dq.buf.View(dt, tokens, qw, off), tk = dk.buf.View(dt, tokens, kw, off),
                   tv = dv.buf.View(dt, tokens, kw, off),
                   tkc = kc.buf.View(dt, cache_rows, kw, off + row),  // a guard row each side
          tvc = vc.buf.View(dt, cache_rows, kw, off + row);
      if (b == fused.get()) {
        ASSERT_TRUE(b->RopeKvWrite(tq, tk, tv, dp.t, hd, RopeParams{}, ds.t, tkc, tvc).ok());
      } else {
        ASSERT_TRUE(b->Rope(tq, tk, dp.t, hd, RopeParams{}).ok());
        ASSERT_TRUE(b->KvWrite(tk, tv, ds.t, tkc, tvc).ok());
      }
      got[b == fused.get()] = {ReadFloats(b, dq.t), ReadFloats(b, kc.t), ReadFloats(b, vc.t)};
    }
    EXPECT_EQ(got[1][0], got[0][0]) << "q";
    EXPECT_EQ(got[1][1], got[0][1]) << "k cache and its guards";
    EXPECT_EQ(got[1][2], got[0][2]) << "v cache and its guards";
    // Only cache rows 5 and 9 (buffer rows 6 and 10) changed.
    for (int r = 0; r < cache_rows + 2; ++r) {
      if (r == 6 || r == 10) continue;
      for (int e = 0; e < kw; ++e) {
        const size_t i = shift + size_t(r) * kw + e;
        ASSERT_EQ(got[1][1][i], cache[i]) << "k cache buffer row " << r << " was written";
        ASSERT_EQ(got[1][2][i], cache[i]) << "v cache buffer row " << r << " was written";
      }
    }
  }
}

// The fused set's greedy rows split their vocabulary over blocks (kernel_plan.h's SampleSplits) and
// merge the partials: the CPU's tokens, ties across split boundaries and NaNs included, beside
// sampled rows (which stay one block each), on repeated launches (the per-row counters reset).
TEST(CudaFusedKernelsTest, SplitGreedySamplingMatchesCpu) {
  SATURN_REQUIRE_CUDA_FUSED(fused);
  auto cpu = CreateBackend("cpu", 2, "f32");
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  int sms = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), cudaSuccess);
  std::mt19937 rng(81);
  for (int vocab : {32000, 128256}) {
    for (int rows : {1, 3, 8}) {
      SCOPED_TRACE(absl::StrCat("vocab ", vocab, ", rows ", rows));
      std::vector<float> logits = LmLikeLogits(rng, rows, vocab);
      std::vector<SamplingRow> params(rows, SamplingRow{0.0f});
      const int splits = gpu::SampleSplits(rows, vocab, sms);
      ASSERT_GT(splits, 1);  // few rows, a large vocabulary: always split
      const int chunk = (vocab + splits - 1) / splits;
      // Row 0: the maximum tied at the last entry of split 0 and the first of split 1.
      logits[chunk - 1] = logits[chunk] = 1000.0f;
      if (rows > 1) {  // row 1: NaNs everywhere but a few entries of the last split
        for (int i = 0; i < vocab; ++i) logits[vocab + i] = i < vocab - 7 ? NAN : 0.5f * i;
      }
      if (rows > 2) params[2] = SamplingRow{0.8f, 40, 0.9f, 7, 3};  // a sampled row
      if (rows == 8) {
        params[3].temperature = -1.0f;  // greedy too, as <= 0 and NaN are
        params[4].temperature = NAN;
        for (int i = 0; i < vocab; ++i) {
          logits[5 * size_t(vocab) + i] = NAN;        // all NaN: token 0
          logits[6 * size_t(vocab) + i] = -INFINITY;  // all -inf: the first
        }
      }
      const auto want = SampleOn(**cpu, logits, vocab, params);
      EXPECT_EQ(want[0], chunk - 1);
      if (rows == 8) EXPECT_EQ(want[5], 0);
      for (int launch = 0; launch < 3; ++launch) {
        gpu::RecordLaunch(gpu::KernelFamily::kSample, nullptr, 0, 0, 0);
        EXPECT_EQ(SampleOn(*fused, logits, vocab, params), want) << "launch " << launch;
        EXPECT_EQ(gpu::LastLaunch(gpu::KernelFamily::kSample).grid_blocks, int64_t{rows} * splits);
      }
    }
  }
}

struct AttnCase {
  const char* name;
  int num_heads, num_kv_heads, head_dim;
  std::vector<int> context_lens;  // one decode row per sequence
};
void PrintTo(const AttnCase& c, std::ostream* os) { *os << c.name; }

class CudaSplitAttentionTest : public ::testing::TestWithParam<AttnCase> {};

TEST_P(CudaSplitAttentionTest, MatchesCpu) {
  const AttnCase& c = GetParam();
  SATURN_REQUIRE_CUDA_FUSED(gpu);
  std::unique_ptr<Backend> cpu = Cpu();
  ASSERT_NE(cpu, nullptr);
  const AttentionShape shape{c.num_heads, c.num_kv_heads, c.head_dim, /*block_size=*/16,
                             1.0f / std::sqrt(static_cast<float>(c.head_dim))};
  // A block table longer than any context (as the runner's), so splits follow capacity.
  const std::vector<int> ones(c.context_lens.size(), 1);
  const PagedAttentionInputs in =
      MakePagedAttention(shape, ones, c.context_lens, /*spare_blocks=*/8, 7, 2.0f);
  for (auto f : {gpu::KernelFamily::kAttentionDecode, gpu::KernelFamily::kAttentionCombine}) {
    gpu::RecordLaunch(f, nullptr, 0, 0, 0);
  }
  const std::vector<float> ref = RunPagedAttention(cpu.get(), in),
                           got = RunPagedAttention(gpu.get(), in);
  EXPECT_LT(RelError(got, ref), kBf16Tolerance);
  // The split kernel ran (with a combine where it split), or the baseline kernel past a group of 8.
  int sms = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), cudaSuccess);
  const gpu::LaunchRecord decode = gpu::LastLaunch(gpu::KernelFamily::kAttentionDecode);
  const bool combined = gpu::LastLaunch(gpu::KernelFamily::kAttentionCombine).kernel != nullptr;
  if (c.num_heads / c.num_kv_heads > gpu::kSplitMaxGroup) {
    EXPECT_EQ(decode.grid_blocks, int64_t{c.num_heads} * in.seqs);
    EXPECT_FALSE(combined);
  } else {
    const int splits = gpu::DecodeSplits(in.seqs, c.num_heads, c.num_kv_heads, c.head_dim,
                                         int64_t{in.max_blocks} * shape.block_size, sms,
                                         gpu::kSplitWorkspaceBytes / sizeof(float));
    EXPECT_EQ(decode.grid_blocks, int64_t{c.num_kv_heads} * in.seqs * splits);
    EXPECT_EQ(combined, splits > 1);
  }
}

std::vector<int> Contexts(int n, int seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> d(1, 700);
  std::vector<int> v(n);
  for (int& x : v) x = d(rng);
  return v;
}

INSTANTIATE_TEST_SUITE_P(
    Cases, CudaSplitAttentionTest,
    ::testing::Values(AttnCase{"b1_small_shape_long", 12, 4, 64, {2000}},
                      AttnCase{"b1_short_context_empty_splits", 12, 4, 64, {3}},
                      AttnCase{"b1_1b_shape", 32, 8, 64, {1025}},
                      AttnCase{"b3_mha_hd128", 4, 4, 128, {64, 65, 1}},
                      AttnCase{"b2_group8_hd32", 16, 2, 32, {500, 129}},
                      AttnCase{"b2_group16_falls_back", 16, 1, 64, {300, 40}},
                      AttnCase{"b1_hd256", 4, 2, 256, {900}},
                      AttnCase{"b64_small_shape", 12, 4, 64, Contexts(64, 3)},
                      AttnCase{"b256_1b_shape_no_split", 32, 8, 64, Contexts(256, 4)}),
    [](const ::testing::TestParamInfo<AttnCase>& i) { return std::string(i.param.name); });

}  // namespace
}  // namespace saturn::testing
