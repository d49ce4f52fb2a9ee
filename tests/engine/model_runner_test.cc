// The runner's paged, batched, chunked forward pass against the dense float64 reference.
#include "engine/model_runner.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "engine/block_manager.h"
#include "kernels/half_float.h"
#include "tests/engine/reference_model.h"
#include "tests/engine/runner_test_util.h"

namespace saturn {
namespace {

using testing_runner::TinyWeights;
using testing_runner::WholePromptPlan;

constexpr double kTol = 2e-4;  // f32 CPU path vs float64 reference, normalised L2

double RelErr(const float* got, const std::vector<double>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    num += (got[i] - ref[i]) * (got[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  return std::sqrt(num / den);
}

class RunnerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    weights_ = TinyWeights(7, 256);
    ASSERT_FALSE(HasFailure());
    auto be = CreateBackend("cpu", 2, "f32");  // f32: logits compared at f32 tolerance
    ASSERT_TRUE(be.ok());
    backend_ = std::move(*be);
    // Small blocks: many block boundaries inside short prompts.
    const RunnerConfig rc{.max_num_seqs_limit = 8,
                          .max_num_batched_tokens_limit = 256,
                          .max_model_len = 256,
                          .block_size = 4,
                          .num_kv_blocks = 200};
    auto r = ModelRunner::Create(backend_.get(), weights_, rc);
    ASSERT_TRUE(r.ok()) << r.status();
    runner_ = std::move(*r);
  }

  ModelWeights weights_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<ModelRunner> runner_;
};

TEST_F(RunnerTest, WholePromptMatchesDenseReference) {
  std::mt19937 rng(1);
  for (int len : {1, 5, 17, 40}) {
    std::vector<int> tokens(len);
    for (int& t : tokens) t = rng() % weights_.config.vocab_size;
    const auto ref = testing_ref::ReferenceLogits(weights_, tokens);
    BlockManager blocks(200, 4);
    const StepPlan plan = WholePromptPlan(blocks, tokens);
    std::vector<float> logits;
    ASSERT_TRUE(runner_->ExecuteWithLogits(plan, &logits).ok());
    EXPECT_LT(RelErr(logits.data(), ref.back()), kTol) << "prompt length " << len;
  }
}

// A Llama 3.x shape: llama3 RoPE scaling (an original context of 64, so a 60-token prompt
// crosses the high, smoothed and low frequency bands), an explicit head_dim that is not
// hidden / heads, and an untied lm_head. The reference without the scaling must differ, so
// the test tells a scaled RoPE from a plain one.
TEST(RunnerLlama3Test, ScaledRopeExplicitHeadDimAndUntiedHeadMatchDenseReference) {
  ModelConfig cfg = *PresetConfig("tiny");
  cfg.max_position_embeddings = 256;
  cfg.head_dim = 48;  // hidden 256 / 8 heads would be 32
  cfg.tie_word_embeddings = false;
  cfg.rope_llama3_factor = 8;
  cfg.rope_low_freq_factor = 1;
  cfg.rope_high_freq_factor = 4;
  cfg.rope_original_max_position = 64;
  auto w = RandomWeights(cfg, 11);
  ASSERT_TRUE(w.ok()) << w.status();
  auto be = CreateBackend("cpu", 2, "f32");
  ASSERT_TRUE(be.ok());
  const RunnerConfig rc{.max_num_seqs_limit = 2,
                        .max_num_batched_tokens_limit = 256,
                        .max_model_len = 256,
                        .block_size = 16,
                        .num_kv_blocks = 16};
  auto runner = ModelRunner::Create(be->get(), *w, rc);
  ASSERT_TRUE(runner.ok()) << runner.status();

  std::mt19937 rng(3);
  std::vector<int> tokens(60);
  for (int& t : tokens) t = rng() % cfg.vocab_size;
  BlockManager blocks(16, 16);
  const StepPlan plan = WholePromptPlan(blocks, tokens);
  std::vector<float> logits;
  ASSERT_TRUE((*runner)->ExecuteWithLogits(plan, &logits).ok());
  EXPECT_LT(RelErr(logits.data(), testing_ref::ReferenceLogits(*w, tokens).back()), kTol);

  ModelWeights plain = *w;
  plain.config.rope_llama3_factor = 0;
  EXPECT_GT(RelErr(logits.data(), testing_ref::ReferenceLogits(plain, tokens).back()), 10 * kTol);
}

// bf16 weights (--dtype bf16): every GEMM multiplies bf16 weights by bf16-rounded inputs with
// f32 sums, and the KV cache holds bf16, so against the float64 reference over the same bf16
// weights the logits differ by the inputs' and the cached keys' and values' rounding only
// (bf16 tolerance). Weight bytes: 2 per GEMM parameter, 4 for the embedding table and norms
// (f32 activations); KV bytes: 2 per cached element.
TEST(RunnerBf16Test, WholePromptMatchesReferenceAtBf16Tolerance) {
  auto cfg = PresetConfig("tiny");
  ASSERT_TRUE(cfg.ok());
  cfg->max_position_embeddings = 256;
  cfg->tie_word_embeddings = false;
  auto w = RandomWeights(*cfg, 11);
  ASSERT_TRUE(w.ok()) << w.status();
  auto be = CreateBackend("cpu", 2, "bf16");
  ASSERT_TRUE(be.ok()) << be.status();
  ASSERT_EQ((*be)->weight_dtype(), DType::kBF16);
  ASSERT_EQ((*be)->kv_cache_dtype(), DType::kBF16);
  const RunnerConfig rc{.max_num_seqs_limit = 2,
                        .max_num_batched_tokens_limit = 64,
                        .max_model_len = 64,
                        .block_size = 4,
                        .num_kv_blocks = 40};
  auto runner = ModelRunner::Create(be->get(), *w, rc);
  ASSERT_TRUE(runner.ok()) << runner.status();
  ModelWeights rounded = *w;  // what the device holds
  auto round = [](std::vector<float>& v) {
    for (float& x : v) x = Bf16ToF32(F32ToBf16(x));
  };
  size_t matrix_params = rounded.lm_head.size(),
         other_params = rounded.embedding.size() + rounded.final_norm.size();
  round(rounded.lm_head);
  for (LayerWeights& l : rounded.layers) {
    for (std::vector<float>* m : {&l.wqkv, &l.wo, &l.w_gate_up, &l.w_down}) {
      round(*m);
      matrix_params += m->size();
    }
    other_params += l.attn_norm.size() + l.mlp_norm.size();
  }
  EXPECT_EQ((*runner)->weight_bytes(), 2 * matrix_params + 4 * other_params);
  EXPECT_EQ((*runner)->kv_cache_bytes(),
            ModelRunner::KvBytesPerBlock(*cfg, 4, DType::kBF16) * (rc.num_kv_blocks + 1));
  std::mt19937 rng(2);
  for (int len : {1, 17, 40}) {
    std::vector<int> tokens(len);
    for (int& t : tokens) t = rng() % cfg->vocab_size;
    const auto ref = testing_ref::ReferenceLogits(rounded, tokens);
    BlockManager blocks(40, 4);
    const StepPlan plan = WholePromptPlan(blocks, tokens);
    std::vector<float> logits;
    ASSERT_TRUE((*runner)->ExecuteWithLogits(plan, &logits).ok());
    EXPECT_LT(RelErr(logits.data(), ref.back()), 3e-2) << "prompt length " << len;
  }
}

// Several sequences advance in random chunks, interleaved in random batch compositions, over
// shuffled block tables. Every chunk's last row must match the reference at that position.
TEST_F(RunnerTest, ChunkedBatchedPagedMatchesReferenceWhateverTheComposition) {
  std::mt19937 rng(2);
  const int n = 5;
  std::vector<std::vector<int>> seqs(n);
  std::vector<std::vector<std::vector<double>>> refs(n);
  for (int i = 0; i < n; ++i) {
    seqs[i].resize(9 + 7 * i);
    for (int& t : seqs[i]) t = rng() % weights_.config.vocab_size;
    refs[i] = testing_ref::ReferenceLogits(weights_, seqs[i]);
  }
  BlockManager blocks(200, 4);
  // Scatter the block ids: take and return a random set first.
  std::vector<int> scratch;
  ASSERT_TRUE(blocks.EnsureCapacity(&scratch, 4 * 37));
  std::shuffle(scratch.begin(), scratch.end(), rng);
  std::vector<int> keep(scratch.begin(), scratch.begin() + 20);
  scratch.erase(scratch.begin(), scratch.begin() + 20);
  blocks.Release(&scratch);
  std::vector<int> done(n, 0);
  std::vector<std::vector<int>> tables(n);
  int checked = 0;
  while (true) {
    StepPlan plan;
    std::vector<int> order(n);
    for (int i = 0; i < n; ++i) order[i] = i;
    std::shuffle(order.begin(), order.end(), rng);
    for (int i : order) {
      const int left = static_cast<int>(seqs[i].size()) - done[i];
      if (left == 0 || rng() % 3 == 0) continue;
      const int chunk = std::min<int>(left, 1 + rng() % 9);
      ScheduledSeq s;
      s.request_id = i;
      s.start_position = done[i];
      s.token_ids.assign(seqs[i].begin() + done[i], seqs[i].begin() + done[i] + chunk);
      ASSERT_TRUE(blocks.EnsureCapacity(&tables[i], done[i] + chunk));
      s.block_table = tables[i];
      s.sample = true;
      plan.seqs.push_back(s);
    }
    if (plan.seqs.empty()) {
      bool all_done = true;
      for (int i = 0; i < n; ++i) all_done &= done[i] == static_cast<int>(seqs[i].size());
      if (all_done) break;
      continue;
    }
    std::vector<float> logits;
    ASSERT_TRUE(runner_->ExecuteWithLogits(plan, &logits).ok());
    const int v = weights_.config.vocab_size;
    for (size_t r = 0; r < plan.seqs.size(); ++r) {
      const ScheduledSeq& s = plan.seqs[r];
      const int pos = s.start_position + s.num_new_tokens() - 1;
      EXPECT_LT(RelErr(logits.data() + r * v, refs[s.request_id][pos]), kTol)
          << "seq " << s.request_id << " position " << pos << " batch of " << plan.seqs.size();
      done[s.request_id] += s.num_new_tokens();
      ++checked;
    }
  }
  EXPECT_GT(checked, 10);
}

TEST_F(RunnerTest, OpRecordsCarryCostsAndTimes) {
  BlockManager blocks(200, 4);
  const StepPlan plan = WholePromptPlan(blocks, {3, 4, 5, 6, 7});
  auto out = runner_->Execute(plan, true);
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->sampled.size(), 1u);
  const int layers = weights_.config.num_layers;
  int gemms = 0, attn = 0;
  for (const OpRecord& op : out->timing.ops) {
    gemms += op.kind == OpKind::kGemm;
    attn += op.kind == OpKind::kAttention;
    EXPECT_GE(op.device_end_us, op.device_begin_us);
  }
  EXPECT_EQ(gemms, layers * 4 + 1);  // qkv (one GemmSplit), o, gate_up, down per layer + LM head
  EXPECT_EQ(attn, layers);
  EXPECT_GT(out->timing.device_busy_us, 0);
  EXPECT_FALSE(out->graph_replayed);
  // Graphs need a backend that has them.
  EXPECT_EQ(runner_->SetUseGraphs(true).code(), absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace saturn
