// bench/kl_eval.h (saturn-bench-kl's core) on the tiny model through the same code path: one row
// compared by hand, f32 against itself (KL 0, same top 1, equal perplexities), q8_0 and q4_0
// against f32 (KL > 0, q4_0's above q8_0's), and the numbers the same on a second run.
#include "bench/kl_eval.h"

#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "engine/model/model_config.h"
#include "engine/model/weights.h"
#include "engine/model_runner.h"
#include "kernels/backend.h"

namespace saturn::bench {
namespace {

TEST(KlEvalTest, CompareRowByHand) {
  // ref: softmax(ln 1, ln 3) = (0.25, 0.75); q: (0.5, 0.5).
  const float ref[] = {0.0f, std::log(3.0f)}, q[] = {1.0f, 1.0f};
  const KlRow r = CompareRow(ref, q, 2, 1);
  EXPECT_NEAR(r.kl, 0.25 * std::log(0.25 / 0.5) + 0.75 * std::log(0.75 / 0.5), 1e-6);
  EXPECT_NEAR(r.nll_ref, -std::log(0.75), 1e-6);
  EXPECT_NEAR(r.nll_q, std::log(2.0), 1e-6);
  EXPECT_NEAR(r.p_q, 0.5, 1e-6);
  EXPECT_FALSE(r.same_top);  // ref: token 1; q: a tie, the first maximum (token 0)
  const KlRow self = CompareRow(ref, ref, 2, 0);
  EXPECT_EQ(self.kl, 0.0);
  EXPECT_TRUE(self.same_top);
}

TEST(KlEvalTest, SummarizeMatchesLlamaCppDefinitions) {
  std::vector<KlRow> rows(4);
  for (int i = 0; i < 4; ++i) {
    rows[i].kl = i;  // 0, 1, 2, 3
    rows[i].nll_ref = 1.0;
    rows[i].nll_q = 1.0 + 0.1 * i;
    rows[i].same_top = i != 0;
  }
  const KlSummary s = Summarize(rows);
  EXPECT_EQ(s.positions, 4);
  EXPECT_DOUBLE_EQ(s.mean_kl, 1.5);
  EXPECT_NEAR(s.mean_kl_se, std::sqrt(1.25 / 3), 1e-12);  // population variance / (n - 1)
  EXPECT_DOUBLE_EQ(s.max_kl, 3);
  EXPECT_DOUBLE_EQ(s.median_kl, 1.5);
  EXPECT_NEAR(s.p99_kl, 2.97, 1e-12);
  EXPECT_DOUBLE_EQ(s.same_top, 0.75);
  EXPECT_NEAR(s.ppl_ref, std::exp(1.0), 1e-12);
  EXPECT_NEAR(s.ln_ppl_ratio, 0.15, 1e-12);
  EXPECT_NEAR(s.ppl_ratio, std::exp(0.15), 1e-12);
}

// The tiny preset's weights on two CPU backends: f32 reference and `dtype` candidate.
class KlRunnersTest : public ::testing::Test {
 protected:
  static KlOptions Options() {
    KlOptions o;
    o.context = 48;
    o.score_from = 16;
    o.rows_per_step = 12;  // several scored steps per chunk, the last one short
    o.block_size = 16;
    o.sample_batch = 3;
    return o;
  }
  static void SetUpTestSuite() {
    auto cfg = PresetConfig("tiny");
    ASSERT_TRUE(cfg.ok()) << cfg.status();
    auto w = RandomWeights(*cfg, 1234);
    ASSERT_TRUE(w.ok()) << w.status();
    weights_ = new ModelWeights(std::move(*w));
  }
  static void TearDownTestSuite() {
    delete weights_;
    weights_ = nullptr;
  }
  struct Side {
    std::unique_ptr<Backend> backend;
    std::unique_ptr<ModelRunner> runner;
  };
  static Side Make(const std::string& dtype) {
    Side s;
    auto b = CreateBackend("cpu", 2, dtype, "f32");
    EXPECT_TRUE(b.ok()) << b.status();
    if (!b.ok()) return s;
    s.backend = std::move(*b);
    auto r = ModelRunner::Create(s.backend.get(), *weights_, KlRunnerConfig(Options()));
    EXPECT_TRUE(r.ok()) << r.status();
    if (r.ok()) s.runner = std::move(*r);
    return s;
  }
  // The sampled stream (4 chunks: one more than a sampling batch), from a fresh f32 runner.
  static std::vector<std::vector<int>> Stream() {
    Side ref = Make("f32");
    if (ref.runner == nullptr) return {};
    auto chunks = SampleChunks(*ref.runner, 4, weights_->config.bos_token_id, 7, Options());
    EXPECT_TRUE(chunks.ok()) << chunks.status();
    return chunks.ok() ? *chunks : std::vector<std::vector<int>>{};
  }
  static KlSummary Compare(const std::string& dtype, const std::vector<std::vector<int>>& chunks) {
    Side ref = Make("f32"), cand = Make(dtype);
    if (ref.runner == nullptr || cand.runner == nullptr) return {};
    auto rows = CompareRunners(*ref.runner, *cand.runner, chunks, Options());
    EXPECT_TRUE(rows.ok()) << rows.status();
    return rows.ok() ? Summarize(*rows) : KlSummary{};
  }
  static ModelWeights* weights_;
};

ModelWeights* KlRunnersTest::weights_ = nullptr;

TEST_F(KlRunnersTest, SampledStreamIsDeterministicAndWellFormed) {
  const auto a = Stream(), b = Stream();
  ASSERT_EQ(a.size(), 4u);
  EXPECT_EQ(a, b);
  for (const auto& c : a) {
    ASSERT_EQ(c.size(), 48u);
    EXPECT_EQ(c[0], weights_->config.bos_token_id);
    for (int t : c) {
      EXPECT_GE(t, 0);
      EXPECT_LT(t, weights_->config.vocab_size);
    }
  }
  EXPECT_NE(a[0], a[1]);  // each chunk draws its own tokens
}

TEST_F(KlRunnersTest, F32AgainstItselfIsZero) {
  const KlSummary s = Compare("f32", Stream());
  EXPECT_EQ(s.positions, 4 * (48 - 1 - 16));
  EXPECT_EQ(s.mean_kl, 0.0);
  EXPECT_EQ(s.max_kl, 0.0);
  EXPECT_EQ(s.same_top, 1.0);
  EXPECT_EQ(s.ppl_q, s.ppl_ref);
  EXPECT_GT(s.ppl_ref, 1.0);
}

TEST_F(KlRunnersTest, QuantizedDivergesMoreWithFewerBits) {
  const auto chunks = Stream();
  const KlSummary q8 = Compare("q8_0", chunks), q4 = Compare("q4_0", chunks);
  EXPECT_EQ(q8.positions, 4 * 31);
  EXPECT_GT(q8.mean_kl, 0.0);
  EXPECT_GT(q4.mean_kl, q8.mean_kl);
  EXPECT_GT(q4.p99_kl, q8.p99_kl);
  EXPECT_GE(q8.same_top, q4.same_top);
  EXPECT_LE(q8.max_kl, q4.max_kl);
  // Deterministic: the same stream and weights give the same numbers, bit for bit.
  const KlSummary again = Compare("q8_0", chunks);
  EXPECT_EQ(again.mean_kl, q8.mean_kl);
  EXPECT_EQ(again.max_kl, q8.max_kl);
  EXPECT_EQ(again.same_top, q8.same_top);
  EXPECT_EQ(again.ppl_q, q8.ppl_q);
}

TEST_F(KlRunnersTest, ChunksFromTokensPutsBosFirst) {
  KlOptions o = Options();
  std::vector<int> ids(130);
  for (int i = 0; i < 130; ++i) ids[i] = 10 + i;
  const auto all = ChunksFromTokens(ids, 1, 0, o);
  ASSERT_EQ(all.size(), 2u);  // whole chunks of 48 only
  EXPECT_EQ(all[0][0], 1);
  EXPECT_EQ(all[0][1], 11);
  EXPECT_EQ(all[1][0], 1);
  EXPECT_EQ(all[1][47], 10 + 95);
  EXPECT_EQ(ChunksFromTokens(ids, 1, 1, o).size(), 1u);
}

}  // namespace
}  // namespace saturn::bench
