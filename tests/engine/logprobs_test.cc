// Logprobs: the host log_softmax/rank/top-N helper on hand-made rows, then the engine's
// generated-token and prompt logprobs against the dense float64 reference (chunked prefill,
// preemption), the tokens drawn unchanged by asking, and the validation limits.
#include "engine/logprobs.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "engine/engine.h"
#include "engine/model/weights.h"
#include "engine/model_runner.h"
#include "reference_model.h"

namespace saturn {
namespace {

constexpr double kLpTol = 2e-3;  // f32 CPU forward vs float64 reference, absolute, in nats

TEST(ComputeLogprobsTest, LogSoftmaxRankAndTopWithTies) {
  const std::vector<float> logits = {1.0f, 3.0f, 2.0f, 3.0f, -1.0f};
  double z = 0;
  for (float x : logits) z += std::exp(double(x));
  const PositionLogprobs lp = ComputeLogprobs(logits.data(), 5, 2, 3);
  EXPECT_EQ(lp.token.token_id, 2);
  EXPECT_NEAR(lp.token.logprob, 2.0 - std::log(z), 1e-6);
  EXPECT_EQ(lp.token.rank, 3);  // two tokens (1 and 3) are strictly more likely
  ASSERT_EQ(lp.top.size(), 3u);
  EXPECT_EQ(lp.top[0].token_id, 1);  // tie at 3.0: lower id first, both rank 1
  EXPECT_EQ(lp.top[1].token_id, 3);
  EXPECT_EQ(lp.top[2].token_id, 2);
  EXPECT_EQ(lp.top[0].rank, 1);
  EXPECT_EQ(lp.top[1].rank, 1);
  EXPECT_EQ(lp.top[2].rank, 3);
  EXPECT_NEAR(lp.top[0].logprob, 3.0 - std::log(z), 1e-6);
  EXPECT_TRUE(ComputeLogprobs(logits.data(), 5, 4, 0).top.empty());
  EXPECT_EQ(ComputeLogprobs(logits.data(), 5, 4, 0).token.rank, 5);
  // Large logits: no overflow (the max is subtracted before exp).
  const std::vector<float> big = {1000.f, 1000.f};
  EXPECT_NEAR(ComputeLogprobs(big.data(), 2, 0, 2).token.logprob, -std::log(2.0), 1e-6);
}

EngineConfig TinyConfig() {
  EngineConfig c;
  c.model = "tiny";
  c.backend = "cpu";
  c.num_threads = 2;
  c.dtype = "f32";  // compared against the float64 reference at f32 tolerance
  c.max_model_len = 128;
  c.max_num_seqs_limit = 8;
  c.max_num_batched_tokens_limit = 256;
  c.options.max_num_seqs = 8;
  c.options.max_num_batched_tokens = 8;  // prompts of 20 tokens prefill in three chunks
  return c;
}

GenerateRequest Req(int n_prompt, int max_tokens, int logprobs, int prompt_logprobs) {
  GenerateRequest r;
  for (int i = 0; i < n_prompt; ++i) r.prompt.push_back(3 + (i * 131 + n_prompt * 7) % 4000);
  r.sampling.max_tokens = max_tokens;
  r.sampling.ignore_eos = true;
  r.sampling.logprobs = logprobs;
  r.sampling.prompt_logprobs = prompt_logprobs;
  return r;
}

struct Result {
  std::vector<int> tokens;
  std::vector<PositionLogprobs> logprobs, prompt_logprobs;
  int events_with_prompt_logprobs = 0;
};

// Every event of an open stream until the final one.
Result Drain(RequestStream* s) {
  Result out;
  TokenEvent ev;
  while (s->Next(&ev)) {
    out.tokens.insert(out.tokens.end(), ev.token_ids.begin(), ev.token_ids.end());
    if (!ev.logprobs.empty()) EXPECT_EQ(ev.logprobs.size(), ev.token_ids.size());
    out.logprobs.insert(out.logprobs.end(), ev.logprobs.begin(), ev.logprobs.end());
    if (!ev.prompt_logprobs.empty()) {
      ++out.events_with_prompt_logprobs;
      out.prompt_logprobs = ev.prompt_logprobs;
    }
  }
  return out;
}

Result Collect(Engine* e, const GenerateRequest& r) {
  auto s = RequestStream::Open(e, r);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? Drain(s->get()) : Result{};
}

std::vector<double> LogSoftmax(const std::vector<double>& logits) {
  double mx = *std::max_element(logits.begin(), logits.end()), z = 0;
  for (double x : logits) z += std::exp(x - mx);
  std::vector<double> lp(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) lp[i] = logits[i] - mx - std::log(z);
  return lp;
}

// One position against the reference distribution `ref` (log_softmax of float64 logits).
void ExpectMatches(const PositionLogprobs& got, int token, int top_n,
                   const std::vector<double>& ref, const std::string& where) {
  EXPECT_EQ(got.token.token_id, token) << where;
  EXPECT_NEAR(got.token.logprob, ref[token], kLpTol) << where;
  // The rank may differ from the reference's only among tokens within the tolerance.
  int above_hi = 0, above_lo = 0;
  for (double x : ref) {
    above_hi += x > ref[token] + kLpTol;
    above_lo += x > ref[token] - kLpTol;
  }
  EXPECT_GE(got.token.rank, 1 + above_hi) << where;
  EXPECT_LE(got.token.rank, std::max(1, above_lo)) << where;
  ASSERT_EQ(static_cast<int>(got.top.size()), top_n) << where;
  std::vector<double> sorted = ref;
  std::sort(sorted.rbegin(), sorted.rend());
  for (int k = 0; k < top_n; ++k) {
    EXPECT_NEAR(got.top[k].logprob, ref[got.top[k].token_id], kLpTol) << where << " top " << k;
    EXPECT_NEAR(got.top[k].logprob, sorted[k], kLpTol) << where << " top " << k;
    if (k > 0) EXPECT_LE(got.top[k].logprob, got.top[k - 1].logprob) << where;
  }
}

class LogprobsEngineTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto e = Engine::Create(TinyConfig());
    ASSERT_TRUE(e.ok()) << e.status();
    engine_ = e->release();
    auto w = RandomWeights(*PresetConfig("tiny"), TinyConfig().weight_seed);
    ASSERT_TRUE(w.ok());
    weights_ = new ModelWeights(std::move(*w));
  }
  static void TearDownTestSuite() {
    delete engine_;
    delete weights_;
  }
  static inline Engine* engine_ = nullptr;
  static inline ModelWeights* weights_ = nullptr;
};

TEST_F(LogprobsEngineTest, PromptAndGeneratedLogprobsMatchTheFloat64Reference) {
  GenerateRequest r = Req(20, 6, 5, 3);
  r.sampling.temperature = 0.9f;  // logprobs are of the raw distribution all the same
  r.sampling.top_k = 40;
  r.sampling.seed = 11;
  const Result got = Collect(engine_, r);
  ASSERT_EQ(got.tokens.size(), 6u);
  ASSERT_EQ(got.logprobs.size(), 6u);
  ASSERT_EQ(got.prompt_logprobs.size(), 19u);  // prompt tokens 1..19
  EXPECT_EQ(got.events_with_prompt_logprobs, 1);

  std::vector<int> all = r.prompt;
  all.insert(all.end(), got.tokens.begin(), got.tokens.end());
  all.pop_back();  // the last token predicts nothing we check
  const auto logits = testing_ref::ReferenceLogits(*weights_, all);
  for (int i = 0; i + 1 < 20; ++i) {
    ExpectMatches(got.prompt_logprobs[i], r.prompt[i + 1], 3, LogSoftmax(logits[i]),
                  "prompt token " + std::to_string(i + 1));
  }
  for (int k = 0; k < 6; ++k) {
    ExpectMatches(got.logprobs[k], got.tokens[k], 5, LogSoftmax(logits[19 + k]),
                  "generated token " + std::to_string(k));
  }
}

TEST_F(LogprobsEngineTest, GreedyTokensAreRankOneAndTopOne) {
  const Result got = Collect(engine_, Req(9, 5, 0, -1));
  ASSERT_EQ(got.logprobs.size(), 5u);
  EXPECT_TRUE(got.prompt_logprobs.empty());
  for (const PositionLogprobs& lp : got.logprobs) {
    EXPECT_EQ(lp.token.rank, 1);
    EXPECT_TRUE(lp.top.empty());
    EXPECT_LE(lp.token.logprob, 0.f);
  }
}

TEST_F(LogprobsEngineTest, AskingForLogprobsNeverChangesTheTokensDrawn) {
  for (int64_t seed : {1, 2, 3}) {
    GenerateRequest plain = Req(15, 12, -1, -1);
    plain.sampling.temperature = 1.2f;
    plain.sampling.top_p = 0.9f;
    plain.sampling.seed = seed;
    GenerateRequest asking = plain;
    asking.sampling.logprobs = 20;
    asking.sampling.prompt_logprobs = 20;
    const Result a = Collect(engine_, plain);
    // The asking request shares its steps with a plain one: both must keep their tokens.
    auto other = RequestStream::Open(engine_, plain);
    ASSERT_TRUE(other.ok());
    const Result b = Collect(engine_, asking);
    std::vector<int> other_tokens;
    (*other)->Drain(&other_tokens);
    EXPECT_EQ(a.tokens, b.tokens) << "seed " << seed;
    EXPECT_EQ(a.tokens, other_tokens) << "seed " << seed;
    EXPECT_TRUE(a.logprobs.empty());
    EXPECT_EQ(b.logprobs.size(), b.tokens.size());
    EXPECT_EQ(b.prompt_logprobs.size(), 14u);
  }
}

TEST(LogprobsPreemptionTest, PromptLogprobsComeOnceAndMatchAfterRecompute) {
  EngineConfig big_cfg = TinyConfig();
  EngineConfig small_cfg = TinyConfig();
  // 8 blocks of 16 tokens: six requests of ~50 tokens cannot all stay resident.
  small_cfg.kv_cache_bytes =
      8 * ModelRunner::KvBytesPerBlock(*PresetConfig("tiny"), 16, DType::kF32);
  auto big = Engine::Create(big_cfg);
  auto small = Engine::Create(small_cfg);
  ASSERT_TRUE(big.ok() && small.ok());
  std::vector<std::unique_ptr<RequestStream>> streams;
  streams.reserve(6);
  for (int i = 0; i < 6; ++i)
    streams.push_back(*RequestStream::Open(small->get(), Req(18 + i, 30, 2, 2)));
  for (int i = 0; i < 6; ++i) {
    const Result a = Drain(streams[i].get());
    const Result b = Collect(big->get(), Req(18 + i, 30, 2, 2));
    EXPECT_EQ(a.tokens, b.tokens) << "request " << i;
    EXPECT_EQ(a.events_with_prompt_logprobs, 1) << "request " << i;
    ASSERT_EQ(a.prompt_logprobs.size(), b.prompt_logprobs.size()) << "request " << i;
    ASSERT_EQ(a.logprobs.size(), b.logprobs.size()) << "request " << i;
    for (size_t k = 0; k < a.prompt_logprobs.size(); ++k) {
      EXPECT_EQ(a.prompt_logprobs[k].token.token_id, b.prompt_logprobs[k].token.token_id);
      EXPECT_NEAR(a.prompt_logprobs[k].token.logprob, b.prompt_logprobs[k].token.logprob, 1e-4);
    }
    for (size_t k = 0; k < a.logprobs.size(); ++k) {
      EXPECT_NEAR(a.logprobs[k].token.logprob, b.logprobs[k].token.logprob, 1e-4);
    }
  }
  EXPECT_GT((*small)->counters().preemptions, 0);
}

TEST(LogprobsValidationTest, OutOfRangeNamesTheFieldAndTheLimit) {
  ModelLimits limits{4096, 128};
  GenerateRequest r = Req(4, 4, 21, -1);
  absl::Status s = ValidateRequest(r, limits);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("logprobs: must be in [0, 20]"), std::string::npos) << s;
  r = Req(4, 4, 20, 25);
  s = ValidateRequest(r, limits);
  EXPECT_NE(s.message().find("prompt_logprobs: must be in [0, 20]"), std::string::npos) << s;
  EXPECT_TRUE(ValidateRequest(Req(4, 4, 0, 20), limits).ok());
  EXPECT_TRUE(ValidateRequest(Req(4, 4, -1, -1), limits).ok());
}

}  // namespace
}  // namespace saturn
