// Prefix caching in the scheduler: a request takes the cached blocks that start its tokens and
// computes only the rest; what a block holds is checked against a simulated KV cache on every
// step (a block taken from the cache must hold exactly the request's tokens at its positions),
// outputs match a reference, reference counts come back to zero, and the reuse counted with
// caching off is the reuse taken with it on.
#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <vector>

#include "engine/scheduler.h"
#include "gtest/gtest.h"
#include "tests/engine/fake_model.h"

namespace saturn {
namespace {

SchedulerConfig Config(int max_num_seqs, int max_tokens_per_step, bool caching = true) {
  SchedulerConfig c;
  c.max_num_seqs = max_num_seqs;
  c.max_num_batched_tokens = max_tokens_per_step;
  c.max_model_len = 4096;
  c.eos_token_id = 2;
  c.enable_prefix_caching = caching;
  return c;
}

// A prompt: `shared` tokens common to all requests built from `family`, then `own` tokens of
// the request's own.
GenerateRequest Req(int family, int shared, int id, int own, int max_tokens) {
  GenerateRequest r;
  for (int i = 0; i < shared; ++i) r.prompt.push_back(3 + (family * 131 + i * 7) % 97);
  for (int i = 0; i < own; ++i) r.prompt.push_back(3 + (id * 53 + i * 11) % 89);
  r.sampling.max_tokens = max_tokens;
  r.sampling.ignore_eos = true;
  return r;
}

using testing_sched::NextToken;
using testing_sched::Reference;

// Plays the runner over a simulated KV cache: slot (block, row) holds the token whose KV was
// written there. Every plan is checked against it.
struct Sim {
  Scheduler sched;
  int block_size;
  std::map<int, std::vector<int>> cache;  // block -> token at each row (-1: never written)
  std::map<int64_t, std::vector<int>> prompt, out;
  std::map<int64_t, RequestUpdate> finished;
  int64_t computed_tokens = 0, query_tokens = 0, hit_tokens = 0;

  Sim(const SchedulerConfig& c, int blocks, int bs) : sched(c, blocks, bs), block_size(bs) {}

  void Add(int64_t id, const GenerateRequest& r) {
    prompt[id] = r.prompt;
    sched.Add(id, r);
  }

  std::vector<int> Known(int64_t id) {
    std::vector<int> k = prompt[id];
    k.insert(k.end(), out[id].begin(), out[id].end());
    return k;
  }

  int& Slot(const ScheduledSeq& s, int pos) {
    std::vector<int>& rows = cache[s.block_table[pos / block_size]];
    rows.resize(block_size, -1);
    return rows[pos % block_size];
  }

  StepPlan Step() {
    StepPlan plan = sched.Schedule();
    query_tokens += plan.prefix_query_tokens;
    hit_tokens += plan.prefix_hit_tokens;
    std::map<int, int> holders;  // block -> seqs of this step holding it
    for (const ScheduledSeq& s : plan.seqs) {
      for (int b : s.block_table) ++holders[b];
    }
    std::vector<int> sampled;
    for (const ScheduledSeq& s : plan.seqs) {
      const std::vector<int> known = Known(s.request_id);
      // Every position before the chunk holds this request's token there (computed by it, or
      // by another request with the same tokens up to it).
      for (int p = 0; p < s.start_position; ++p) {
        EXPECT_EQ(Slot(s, p), known[p]) << "request " << s.request_id << " position " << p;
      }
      for (int j = 0; j < s.num_new_tokens(); ++j) {
        const int p = s.start_position + j;
        EXPECT_EQ(s.token_ids[j], known[p]);
        const int b = s.block_table[p / block_size];
        EXPECT_EQ(holders[b], 1) << "block " << b << " written while shared";
        EXPECT_EQ(sched.blocks().ref_count(b), 1) << "block " << b;
        Slot(s, p) = s.token_ids[j];
      }
      computed_tokens += s.num_new_tokens();
      if (s.sample) {
        sampled.push_back(
            NextToken(std::vector<int>(known.begin(), known.begin() + s.context_len())));
      }
    }
    for (const RequestUpdate& u : sched.Update(plan, sampled)) {
      auto& o = out[u.request_id];
      o.insert(o.end(), u.new_tokens.begin(), u.new_tokens.end());
      if (u.finish != FinishReason::kNone) finished[u.request_id] = u;
    }
    return plan;
  }

  void RunAll(int max_steps = 20000) {
    for (int i = 0; i < max_steps && sched.HasWork(); ++i) Step();
    EXPECT_FALSE(sched.HasWork());
    EXPECT_EQ(sched.blocks().num_free(), sched.blocks().num_blocks());  // nothing leaked
  }
};

TEST(PrefixCachingTest, SecondRequestTakesTheFirstOnesFullBlocks) {
  Sim sim(Config(8, 1024), 64, 4);
  sim.Add(1, Req(0, 10, 1, 3, 2));  // 13 prompt tokens: three full blocks
  sim.RunAll();
  sim.Add(2, Req(0, 10, 2, 5, 2));  // shares the first 10 tokens: two full blocks
  StepPlan p = sim.Step();
  ASSERT_EQ(p.seqs.size(), 1u);
  EXPECT_EQ(p.seqs[0].start_position, 8);
  EXPECT_EQ(p.num_prefill_tokens, 7);
  EXPECT_EQ(p.prefix_query_tokens, 15);
  EXPECT_EQ(p.prefix_hit_tokens, 8);
  sim.RunAll();
  EXPECT_EQ(sim.out[2], Reference(Req(0, 10, 2, 5, 2)));
}

TEST(PrefixCachingTest, TheLastTokenIsAlwaysComputed) {
  Sim sim(Config(8, 1024), 64, 4);
  sim.Add(1, Req(0, 8, 1, 0, 1));  // exactly two blocks
  sim.RunAll();
  sim.Add(2, Req(0, 8, 2, 0, 3));  // the same prompt: the first block is taken, the second
  StepPlan p = sim.Step();         // recomputed so its last row samples
  ASSERT_EQ(p.seqs.size(), 1u);
  EXPECT_EQ(p.seqs[0].start_position, 4);
  EXPECT_TRUE(p.seqs[0].sample);
  sim.RunAll();
  EXPECT_EQ(sim.out[2], Reference(Req(0, 8, 2, 0, 3)));
}

TEST(PrefixCachingTest, OffCountsTheSameReuseWithoutTakingIt) {
  for (const bool on : {true, false}) {
    Sim sim(Config(8, 1024, on), 64, 4);
    sim.Add(1, Req(0, 16, 1, 2, 2));
    sim.RunAll();
    sim.Add(2, Req(0, 16, 2, 2, 2));
    StepPlan p = sim.Step();
    EXPECT_EQ(p.prefix_caching, on);
    EXPECT_EQ(p.prefix_hit_tokens, 16);
    EXPECT_EQ(p.seqs[0].start_position, on ? 16 : 0);
    sim.RunAll();
  }
}

TEST(PrefixCachingTest, PromptLogprobsAreNeverSkipped) {
  Sim sim(Config(8, 1024), 64, 4);
  sim.Add(1, Req(0, 12, 1, 1, 1));
  sim.RunAll();
  GenerateRequest r = Req(0, 12, 2, 1, 1);
  r.sampling.prompt_logprobs = 0;
  sim.Add(2, r);
  StepPlan p = sim.Step();
  EXPECT_EQ(p.seqs[0].start_position, 0);
  EXPECT_EQ(p.prefix_hit_tokens, 0);
  EXPECT_EQ(static_cast<int>(p.seqs[0].prompt_logprob_targets.size()), 12);
  sim.RunAll();
}

TEST(PrefixCachingTest, GeneratedBlocksAreOnlyTheirOwnRequestsWhenKeyedOnThePrompt) {
  Sim sim(Config(8, 1024), 64, 4);
  sim.Add(1, Req(0, 4, 1, 0, 9));  // 4 prompt tokens, then generated ones fill two blocks
  sim.RunAll();
  // A prompt that is request 1's prompt and outputs: only the prompt block is the same bits.
  GenerateRequest r;
  r.prompt = sim.Known(1);
  r.sampling.max_tokens = 1;
  r.sampling.ignore_eos = true;
  sim.Add(2, r);
  StepPlan p = sim.Step();
  EXPECT_EQ(p.prefix_hit_tokens, 4);
  sim.RunAll();

  SchedulerConfig c = Config(8, 1024);
  c.key_prompt_boundary = false;  // where bits are not kept, generated KV is shared too
  Sim loose(c, 64, 4);
  loose.Add(1, Req(0, 4, 1, 0, 9));
  loose.RunAll();
  r.prompt = loose.Known(1);
  loose.Add(2, r);
  p = loose.Step();
  EXPECT_EQ(p.prefix_hit_tokens, 12);
  loose.RunAll();
}

TEST(PrefixCachingTest, BlocksComputedInAStepAreNotTakenInThatStep) {
  Sim sim(Config(8, 1024), 64, 4);
  sim.Add(1, Req(0, 12, 1, 1, 2));
  sim.Add(2, Req(0, 12, 2, 1, 2));  // admitted beside 1: nothing is cached yet
  StepPlan p = sim.Step();
  ASSERT_EQ(p.seqs.size(), 2u);
  EXPECT_EQ(p.prefix_hit_tokens, 0);
  sim.Add(3, Req(0, 12, 3, 1, 2));  // a step later, 1's blocks are there
  p = sim.Step();
  EXPECT_EQ(p.prefix_hit_tokens, 12);
  sim.RunAll();
}

TEST(PrefixCachingTest, APreemptedRequestTakesBackItsOwnBlocks) {
  // Two requests that outgrow 6 blocks: the newer is preempted, and when it returns its
  // released blocks are still cached unless the older one needed them.
  Sim sim(Config(8, 1024), 6, 4);
  sim.Add(1, Req(0, 8, 1, 0, 12));
  sim.Add(2, Req(1, 8, 2, 0, 12));
  int preempted = 0;
  for (int i = 0; i < 200 && sim.sched.HasWork(); ++i) {
    preempted += static_cast<int>(sim.Step().preempted.size());
  }
  EXPECT_GT(preempted, 0);
  EXPECT_GT(sim.hit_tokens, 0);
  EXPECT_EQ(sim.out[1], Reference(Req(0, 8, 1, 0, 12)));
  EXPECT_EQ(sim.out[2], Reference(Req(1, 8, 2, 0, 12)));
  EXPECT_EQ(sim.sched.blocks().num_free(), 6);
}

// Many requests from a few families of shared prefixes, chunked, under a cache too small to
// keep them all, with cancellations: every output as the reference, no block leaked, and fewer
// tokens computed than without caching.
TEST(PrefixCachingTest, SeededStressKeepsOutputsAndReferenceCounts) {
  int64_t computed[2] = {0, 0};
  for (const bool on : {false, true}) {
    Sim sim(Config(6, 40, on), 48, 4);
    std::mt19937 rng(11);
    std::set<int64_t> cancelled;
    std::map<int64_t, GenerateRequest> reqs;
    int64_t next = 1;
    for (int step = 0; step < 4000 && (next <= 64 || sim.sched.HasWork()); ++step) {
      if (next <= 64 && rng() % 3 == 0) {
        const int family = static_cast<int>(rng() % 3);
        GenerateRequest r = Req(family, 20 + 4 * family, static_cast<int>(next),
                                static_cast<int>(rng() % 9), 1 + static_cast<int>(rng() % 12));
        reqs[next] = r;
        sim.Add(next++, r);
      }
      if (next > 2 && rng() % 40 == 0) {
        const int64_t id = 1 + static_cast<int64_t>(rng() % static_cast<uint32_t>(next - 1));
        if (sim.sched.Cancel(id).has_value()) cancelled.insert(id);
      }
      sim.Step();
    }
    sim.RunAll();
    for (const auto& [id, r] : reqs) {
      if (cancelled.count(id) != 0) continue;
      EXPECT_EQ(sim.out[id], Reference(r)) << "request " << id << (on ? " (on)" : " (off)");
    }
    EXPECT_GT(sim.hit_tokens, 0);
    computed[on ? 1 : 0] = sim.computed_tokens;
  }
  EXPECT_LT(computed[1], computed[0]);
}

}  // namespace
}  // namespace saturn
