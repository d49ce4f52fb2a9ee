// Speculative decoding in the scheduler, driven by fake models over a small vocabulary: greedy
// outputs are the plain decode's in fewer steps, the KV of proposals not kept is rolled back
// (checked against a simulated cache every step), sampled outputs keep the model's
// distribution (a chi-square test over 20,000 requests), limits and reference counts hold, and
// with speculation off the proposals are scored without being used.
#include <cmath>
#include <map>
#include <random>
#include <vector>

#include "engine/scheduler.h"
#include "gtest/gtest.h"
#include "tests/engine/fake_model.h"

namespace saturn {
namespace {

constexpr int kFirstToken = 3, kVocab = 4;  // the fake models draw tokens 3 .. 6

SchedulerConfig Config(int k, int max_num_seqs = 8) {
  SchedulerConfig c;
  c.max_num_seqs = max_num_seqs;
  c.max_num_batched_tokens = 256;
  c.max_model_len = 4096;
  c.eos_token_id = 2;
  c.num_speculative_tokens = k;
  return c;
}

GenerateRequest Req(std::vector<int> prompt, int max_tokens) {
  GenerateRequest r;
  r.prompt = std::move(prompt);
  r.sampling.max_tokens = max_tokens;
  r.sampling.ignore_eos = true;
  return r;
}

// The fake model's distribution over the next token: a function of the last two tokens that
// favours repeating what came two back, so text loops and n-gram proposals are often right;
// every 7th position favours another token, so some proposals are wrong.
std::vector<double> Probs(const std::vector<int>& ctx) {
  const int a = ctx.size() >= 2 ? ctx[ctx.size() - 2] : 0, b = ctx.back();
  const int twist = ctx.size() % 7 == 0 ? (b - kFirstToken + 1) % kVocab : -1;
  std::vector<double> p(kVocab);
  double sum = 0;
  for (int t = 0; t < kVocab; ++t) {
    p[t] = 1.0 + ((a * 7 + b * 3 + t * 5) % 4) + (kFirstToken + t == a ? 6.0 : 0.0) +
           (t == twist ? 12.0 : 0.0);
    sum += p[t];
  }
  for (double& x : p) x /= sum;
  return p;
}

int Greedy(const std::vector<int>& ctx) {
  const std::vector<double> p = Probs(ctx);
  int best = 0;
  for (int t = 1; t < kVocab; ++t) best = p[t] > p[best] ? t : best;
  return kFirstToken + best;
}

// Plays the runner: every row that samples draws from the model at its own context (greedy, or
// from `rng`), over a simulated KV cache that each plan is checked against.
struct Sim {
  Scheduler sched;
  int block_size;
  std::mt19937_64* rng = nullptr;  // null: greedy
  std::map<int, std::vector<int>> cache;
  std::map<int64_t, std::vector<int>> prompt, out;
  int steps = 0, drafted = 0, accepted = 0, shadow_drafted = 0, shadow_accepted = 0;

  Sim(const SchedulerConfig& c, int blocks, int bs) : sched(c, blocks, bs), block_size(bs) {}
  void Add(int64_t id, const GenerateRequest& r) {
    prompt[id] = r.prompt;
    sched.Add(id, r);
  }
  int Draw(const std::vector<int>& ctx) {
    if (rng == nullptr) return Greedy(ctx);
    const std::vector<double> p = Probs(ctx);
    double u = std::uniform_real_distribution<double>(0, 1)(*rng);
    for (int t = 0; t < kVocab; ++t) {
      if ((u -= p[t]) < 0) return kFirstToken + t;
    }
    return kFirstToken + kVocab - 1;
  }
  void Step() {
    StepPlan plan = sched.Schedule();
    ++steps;
    drafted += plan.num_draft_tokens;
    shadow_drafted += plan.shadow_drafted;
    shadow_accepted += plan.shadow_accepted;
    std::vector<int> sampled;
    for (const ScheduledSeq& s : plan.seqs) {
      std::vector<int> known = prompt[s.request_id];
      known.insert(known.end(), out[s.request_id].begin(), out[s.request_id].end());
      for (int p = 0; p < s.start_position; ++p) {  // the KV before the chunk is this request's
        const std::vector<int>& rows = cache[s.block_table[p / block_size]];
        ASSERT_EQ(rows.at(p % block_size), known[p]) << "request " << s.request_id << " pos " << p;
      }
      std::vector<int> ctx(known.begin(), known.begin() + s.start_position);
      for (int j = 0; j < s.num_new_tokens(); ++j) {
        const int p = s.start_position + j;
        std::vector<int>& rows = cache[s.block_table.at(p / block_size)];
        rows.resize(block_size, -1);
        rows[p % block_size] = s.token_ids[j];
        ctx.push_back(s.token_ids[j]);
        // Rows that sample: the chunk's last, and each proposal's row before it.
        if (s.sample && j >= s.num_new_tokens() - 1 - s.num_draft) sampled.push_back(Draw(ctx));
      }
    }
    EXPECT_EQ(static_cast<int>(sampled.size()), plan.num_sample_rows());
    for (const RequestUpdate& u : sched.Update(plan, sampled)) {
      accepted += u.num_accepted;
      EXPECT_LE(u.num_accepted, u.num_draft);
      auto& o = out[u.request_id];
      o.insert(o.end(), u.new_tokens.begin(), u.new_tokens.end());
    }
  }
  void RunAll() {
    for (int i = 0; i < 100000 && sched.HasWork(); ++i) Step();
    EXPECT_FALSE(sched.HasWork());
    EXPECT_EQ(sched.blocks().num_free(), sched.blocks().num_blocks());
  }
};

std::vector<int> GreedyReference(const GenerateRequest& r) {
  return testing_sched::Reference(r, Greedy);
}

TEST(SpeculativeDecodingTest, GreedyOutputsAreThePlainOnesInFewerSteps) {
  std::vector<GenerateRequest> reqs;
  for (int i = 0; i < 6; ++i) reqs.push_back(Req({3 + i % 4, 4, 5 + i % 2, 3}, 40 + 7 * i));
  int steps[2] = {0, 0};
  for (const int k : {0, 4}) {
    Sim sim(Config(k), 256, 4);
    for (int i = 0; i < 6; ++i) sim.Add(i, reqs[i]);
    sim.RunAll();
    for (int i = 0; i < 6; ++i) EXPECT_EQ(sim.out[i], GreedyReference(reqs[i])) << "k " << k;
    steps[k > 0] = sim.steps;
    if (k > 0) {
      EXPECT_GT(sim.drafted, 0);
      EXPECT_GT(sim.accepted, 0);
      EXPECT_LT(sim.accepted, sim.drafted);  // some proposals were rolled back
    }
  }
  EXPECT_LT(steps[1], steps[0]);
}

TEST(SpeculativeDecodingTest, ProposalsRespectMaxTokensAndTheModelLength) {
  SchedulerConfig c = Config(8);
  c.max_model_len = 30;
  Sim sim(c, 64, 4);
  sim.Add(1, Req({3, 4, 3, 4, 3, 4}, 13));               // ends by max_tokens
  sim.Add(2, Req({4, 3, 4, 3, 4, 3, 4, 3, 4, 3}, 100));  // ends by max_model_len
  sim.RunAll();
  EXPECT_EQ(sim.out[1], GreedyReference(Req({3, 4, 3, 4, 3, 4}, 13)));
  EXPECT_EQ(sim.out[2].size(), 20u);
}

TEST(SpeculativeDecodingTest, AStopTokenEndsTheRequestMidProposal) {
  // The greedy continuation of this prompt: stop on its 5th token.
  const GenerateRequest plain = Req({3, 5, 3, 5, 3}, 30);
  const std::vector<int> ref = GreedyReference(plain);
  GenerateRequest r = plain;
  r.sampling.stop_token_ids = {ref[4]};
  int first = 0;
  while (ref[first] != ref[4]) ++first;
  Sim sim(Config(6), 64, 4);
  sim.Add(1, r);
  sim.RunAll();
  EXPECT_EQ(sim.out[1], std::vector<int>(ref.begin(), ref.begin() + first + 1));
}

TEST(SpeculativeDecodingTest, OffScoresProposalsWithoutUsingThem) {
  Sim sim(Config(0), 256, 4);
  sim.Add(1, Req({3, 4, 5, 3, 4}, 60));
  sim.RunAll();
  EXPECT_EQ(sim.drafted, 0);
  EXPECT_GT(sim.shadow_drafted, 0);
  EXPECT_GT(sim.shadow_accepted, 0);
  EXPECT_EQ(sim.out[1], GreedyReference(Req({3, 4, 5, 3, 4}, 60)));
}

TEST(SpeculativeDecodingTest, ProposalsNeverTakeBlocksOrRowsOthersNeed) {
  // A cache of exactly what the requests need without proposals: speculation must never
  // preempt them.
  Sim sim(Config(8, 4), 4 * 8, 4);  // 4 requests of 8 blocks each at most (32 tokens)
  for (int i = 0; i < 4; ++i) sim.Add(i, Req({3, 4, 3, 4}, 28));
  int preempted = 0;
  for (int i = 0; i < 1000 && sim.sched.HasWork(); ++i) {
    const StepPlan plan = sim.sched.Schedule();
    preempted += static_cast<int>(plan.preempted.size());
    // Play the step: every row greedy at its context.
    std::vector<int> sampled;
    for (const ScheduledSeq& s : plan.seqs) {
      std::vector<int> ctx = sim.prompt[s.request_id];
      ctx.insert(ctx.end(), sim.out[s.request_id].begin(), sim.out[s.request_id].end());
      ctx.resize(s.start_position);
      for (int j = 0; j < s.num_new_tokens(); ++j) {
        ctx.push_back(s.token_ids[j]);
        if (s.sample && j >= s.num_new_tokens() - 1 - s.num_draft) sampled.push_back(Greedy(ctx));
      }
    }
    for (const RequestUpdate& u : sim.sched.Update(plan, sampled)) {
      auto& o = sim.out[u.request_id];
      o.insert(o.end(), u.new_tokens.begin(), u.new_tokens.end());
    }
  }
  EXPECT_EQ(preempted, 0);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(sim.out[i], GreedyReference(Req({3, 4, 3, 4}, 28)));
}

// Sampled outputs: the first three tokens of 20,000 requests with speculation and 20,000
// without, drawn from the fake model with independent random numbers; a chi-square test of
// homogeneity over the 64 sequences must not reject at p = 0.01. (The proposer names one token,
// so keeping a proposal exactly when the model's own draw equals it is the rejection rule.)
TEST(SpeculativeDecodingTest, SampledOutputsKeepTheModelsDistribution) {
  constexpr int kRequests = 20000, kLen = 3;
  std::map<std::vector<int>, int> counts[2];
  for (const int k : {0, 3}) {
    std::mt19937_64 rng(k == 0 ? 1 : 2);
    Sim sim(Config(k, 64), 4096, 4);
    sim.rng = &rng;
    for (int i = 0; i < kRequests; ++i) sim.Add(i, Req({3, 4, 3, 4, 3}, kLen));
    sim.RunAll();
    for (int i = 0; i < kRequests; ++i) ++counts[k > 0][sim.out[i]];
    if (k > 0) EXPECT_GT(sim.accepted, kRequests / 10);  // proposals were kept, often
  }
  std::map<std::vector<int>, int> cells;
  for (const auto& c : counts) {
    for (const auto& [seq, n] : c) cells[seq] += n;
  }
  double chi2 = 0;
  int df = -1;
  for (const auto& [seq, total] : cells) {
    const double expected = total / 2.0;  // equal sample sizes
    for (const auto& c : counts) {
      const auto it = c.find(seq);
      const double o = it == c.end() ? 0 : it->second;
      chi2 += (o - expected) * (o - expected) / expected;
    }
    ++df;
  }
  ASSERT_GT(df, 10);
  // The chi-square quantile at 0.99 (Wilson-Hilferty; z = 2.326).
  const double h = 2.0 / (9 * df);
  const double critical = df * std::pow(1 - h + 2.326 * std::sqrt(h), 3);
  EXPECT_LT(chi2, critical) << "df " << df;
}

}  // namespace
}  // namespace saturn
