// CPU paged attention against a float64 reference: several sequences with different query
// chunk and context lengths, shuffled non-contiguous block tables, GQA ratios 1, 3 and 4,
// head dims with and without 16-lane tails, prefill tiles split across several tiles, at
// every kernel level the CPU runs (scalar, AVX2, AVX-512), over f32 and bf16 caches (the
// reference then takes the bf16-rounded keys and values, so the kernel's own error is held to
// the f32 tolerance either way). Cache rows no sequence owns are NaN, so reading past a
// context shows up in the error.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "kernels/half_float.h"
#include "tests/kernels/cpu/cpu_test_util.h"

namespace saturn::testing {
namespace {

struct Case {
  int num_heads, num_kv_heads, head_dim, block_size;
  std::vector<std::pair<int, int>> seqs;  // (query chunk length, context length)
};

class CpuAttentionTest : public ::testing::TestWithParam<int> {};

// The cache as the backend holds it: f32, or each value rounded to bf16.
DevTensor Cache(Backend& b, DType kv, int64_t rows, int64_t cols, const std::vector<float>& host) {
  if (kv == DType::kF32) return F32(b, rows, cols, host);
  std::vector<uint16_t> h(host.size());
  for (size_t i = 0; i < host.size(); ++i) h[i] = F32ToBf16(host[i]);
  return FromHost(b, DType::kBF16, rows, cols, h);
}

void RunCase(Backend& b, const Case& c, DType kv, std::mt19937& rng) {
  const int ns = static_cast<int>(c.seqs.size()), hd = c.head_dim, bs = c.block_size;
  const int width = c.num_kv_heads * hd, qwidth = c.num_heads * hd;
  int max_blocks = 0, total_blocks = 0, total_q = 0, max_q = 0, max_ctx = 0;
  for (auto [len, ctx] : c.seqs) {
    const int nb = (ctx + bs - 1) / bs;
    max_blocks = std::max(max_blocks, nb);
    total_blocks += nb;
    total_q += len;
    max_q = std::max(max_q, len);
    max_ctx = std::max(max_ctx, ctx);
  }
  const int cache_blocks = total_blocks + 3;  // a few blocks nobody owns
  std::vector<int32_t> block_ids(cache_blocks);
  std::iota(block_ids.begin(), block_ids.end(), 0);
  std::shuffle(block_ids.begin(), block_ids.end(), rng);

  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> kc(cache_blocks * bs * width, nan), vc(cache_blocks * bs * width, nan);
  std::vector<int32_t> tables(ns * (max_blocks + 1), -1), qstart = {0}, ctx_lens;
  std::vector<std::vector<float>> keys(ns), values(ns);  // logical [ctx, width] per sequence
  int next_block = 0;
  for (int s = 0; s < ns; ++s) {
    const auto [len, ctx] = c.seqs[s];
    keys[s] = Random(rng, ctx * width);
    values[s] = Random(rng, ctx * width);
    if (kv == DType::kBF16) {  // what the cache holds
      for (std::vector<float>* v : {&keys[s], &values[s]}) {
        for (float& x : *v) x = Bf16ToF32(F32ToBf16(x));
      }
    }
    for (int p = 0; p < ctx; ++p) {
      if (p % bs == 0) tables[s * (max_blocks + 1) + p / bs] = block_ids[next_block++];
      const int row = tables[s * (max_blocks + 1) + p / bs] * bs + p % bs;
      std::copy_n(&keys[s][p * width], width, &kc[row * width]);
      std::copy_n(&values[s][p * width], width, &vc[row * width]);
    }
    qstart.push_back(qstart.back() + len);
    ctx_lens.push_back(ctx);
  }
  std::vector<float> q = Random(rng, total_q * qwidth, -2, 2);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));

  DevTensor dq = F32(b, total_q, qwidth, q), dk = Cache(b, kv, cache_blocks * bs, width, kc);
  DevTensor dv = Cache(b, kv, cache_blocks * bs, width, vc), out = Poisoned(b, total_q, qwidth);
  DevTensor dqs = I32(b, 1, ns + 1, qstart), dctx = I32(b, 1, ns, ctx_lens);
  DevTensor dtab = I32(b, ns, max_blocks + 1, tables);
  AttentionBatch batch{dqs.t, dctx.t, dtab.t, ns, max_q, max_ctx, 0, 0};
  // Chunks of more than one row are prompt rows: a batch-invariant backend takes the
  // lanes-over-rows kernel for their tiles of every size.
  std::vector<uint8_t> prefill;
  for (auto [len, ctx] : c.seqs) prefill.push_back(len > 1 ? 1 : 0);
  batch.prefill = prefill.data();
  AttentionShape shape{c.num_heads, c.num_kv_heads, hd, bs, scale};
  absl::Status st = b.Attention(dq.t, dk.t, dv.t, batch, shape, out.t);
  ASSERT_TRUE(st.ok()) << st;

  std::vector<double> ref(total_q * qwidth);
  const int group = c.num_heads / c.num_kv_heads;
  for (int s = 0; s < ns; ++s) {
    const auto [len, ctx] = c.seqs[s];
    for (int i = 0; i < len; ++i) {
      const int row = qstart[s] + i, n = ctx - len + i + 1;
      for (int h = 0; h < c.num_heads; ++h) {
        const int kvo = (h / group) * hd;
        std::vector<double> sc(n);
        double mx = -1e300, sum = 0;
        for (int p = 0; p < n; ++p) {
          double d = 0;
          for (int e = 0; e < hd; ++e) {
            d += static_cast<double>(q[row * qwidth + h * hd + e]) * keys[s][p * width + kvo + e];
          }
          sc[p] = d * scale;
          mx = std::max(mx, sc[p]);
        }
        for (int p = 0; p < n; ++p) sum += (sc[p] = std::exp(sc[p] - mx));
        for (int e = 0; e < hd; ++e) {
          double acc = 0;
          for (int p = 0; p < n; ++p) acc += sc[p] * values[s][p * width + kvo + e];
          ref[row * qwidth + h * hd + e] = acc / sum;
        }
      }
    }
  }
  EXPECT_LT(RelErr(ToHost<float>(b, out.t), ref), kTol)
      << DTypeName(kv) << " cache, heads " << c.num_heads << "/" << c.num_kv_heads << " hd " << hd
      << " bs " << bs;
}

TEST_P(CpuAttentionTest, MatchesReference) {
  // Batch-invariant (the default: every tile row by row) and not (tiles of up to 64 pairs).
  for (auto [isa, invariant] : [] {
         std::vector<std::pair<cpu::Isa, bool>> v;
         for (cpu::Isa i : SupportedIsas()) v.insert(v.end(), {{i, true}, {i, false}});
         return v;
       }()) {
    SCOPED_TRACE(absl::StrCat(cpu::IsaName(isa), invariant ? " batch-invariant" : ""));
    std::unique_ptr<Backend> b = MakeCpuIsa(GetParam(), isa, "f32", invariant);
    std::mt19937 rng(99);
    const std::vector<Case> cases = {
        // GQA ratio 1, decode-only batch.
        {4, 4, 64, 16, {{1, 1}, {1, 17}, {1, 100}, {1, 16}}},
        // GQA ratio 4, mixed prefill chunks and decode, odd head_dim and block size.
        {8, 2, 24, 5, {{7, 7}, {1, 33}, {12, 40}, {3, 3}, {1, 2}}},
        // GQA ratio 4, chunked prefill continuing a long context.
        {16, 4, 128, 16, {{33, 300}, {1, 257}, {64, 64}}},
        // Single sequence, single head pair.
        {1, 1, 8, 4, {{9, 13}}},
        // GQA ratio 3 (the small preset's), long prefill: several 64-row tiles per KV head,
        // plus a chunk continuing a context and a decode row.
        {12, 4, 64, 16, {{150, 150}, {37, 301}, {1, 90}}},
        // Head dims past one 64-float slice with a partial last vector; > 128.
        {4, 2, 100, 8, {{20, 50}, {1, 7}}},
        {2, 1, 160, 16, {{40, 40}}},
        // Tiles of a few rows whose rows stop at different positions, some before the last
        // chunk of keys: short prefill chunks, group 1, head_dim with a partial vector.
        {2, 2, 40, 4, {{5, 5}, {3, 20}, {6, 33}, {1, 1}}},
        // Decode with groups of 6 and 7 rows.
        {6, 1, 32, 16, {{1, 40}, {1, 3}}},
        {7, 1, 16, 16, {{1, 40}}},
        // Group of 1 with 80 rows: tiles of 64 and 16 rows.
        {2, 2, 80, 16, {{80, 95}}},
    };
    for (DType kv : {DType::kF32, DType::kBF16}) {
      for (const Case& c : cases) RunCase(*b, c, kv, rng);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Threads, CpuAttentionTest, ::testing::Values(1, 2, 3), ThreadsName);

TEST(CpuAttentionErrors, BadBlockIdAndLengths) {
  std::unique_ptr<Backend> b = MakeCpu(2);
  const int bs = 4, hd = 8;
  DevTensor q = F32(*b, 2, hd, std::vector<float>(2 * hd, 0.5f));
  DevTensor kc = F32(*b, 8, hd, std::vector<float>(8 * hd, 0.5f));
  DevTensor vc = F32(*b, 8, hd, std::vector<float>(8 * hd, 0.5f));
  DevTensor out = Poisoned(*b, 2, hd);
  DevTensor qs = I32(*b, 1, 2, {0, 2});
  AttentionShape shape{1, 1, hd, bs, 1.0f};

  DevTensor ctx = I32(*b, 1, 1, {6}), tab = I32(*b, 1, 2, {1, 2});  // block 2 of 2 is out
  absl::Status s = b->Attention(q.t, kc.t, vc.t, AttentionBatch{qs.t, ctx.t, tab.t, 1, 2, 6, 0, 0},
                                shape, out.t);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(s.message(), "attention")) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "block_tables")) << s;

  DevTensor short_ctx = I32(*b, 1, 1, {1}), good_tab = I32(*b, 1, 2, {1, 0});
  s = b->Attention(q.t, kc.t, vc.t, AttentionBatch{qs.t, short_ctx.t, good_tab.t, 1, 2, 6, 0, 0},
                   shape, out.t);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << "query longer than context";

  s = b->Attention(q.t, kc.t, vc.t, AttentionBatch{qs.t, ctx.t, good_tab.t, 1, 2, 6, 0, 0}, shape,
                   out.t);
  EXPECT_TRUE(s.ok()) << s;
  // Uniform keys and values: every output is the value 0.5.
  for (float v : ToHost<float>(*b, out.t)) EXPECT_NEAR(v, 0.5f, 1e-6);

  // The caches are f32 or bf16, both the same.
  DevTensor vc16 = FromHost(*b, DType::kBF16, 8, hd, std::vector<uint16_t>(8 * hd, 0x3f00));
  s = b->Attention(q.t, kc.t, vc16.t, AttentionBatch{qs.t, ctx.t, good_tab.t, 1, 2, 6, 0, 0}, shape,
                   out.t);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(s.message(), "v_cache")) << s;
  DevTensor kc16 = FromHost(*b, DType::kBF16, 8, hd, std::vector<uint16_t>(8 * hd, 0x3f00));
  s = b->Attention(q.t, kc16.t, vc16.t, AttentionBatch{qs.t, ctx.t, good_tab.t, 1, 2, 6, 0, 0},
                   shape, out.t);
  EXPECT_TRUE(s.ok()) << s;
  for (float v : ToHost<float>(*b, out.t)) EXPECT_NEAR(v, 0.5f, 1e-6);  // 0x3f00 is bf16 0.5
}

}  // namespace
}  // namespace saturn::testing
