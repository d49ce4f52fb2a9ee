// Scheduler: chunked prefill, limits, FCFS, preemption and recompute, cancellation, stop
// conditions, and a seeded stress run, all driven through Schedule()/Update() with a fake
// deterministic "model" standing in for the runner.
#include "engine/scheduler.h"

#include <algorithm>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <vector>

#include "gtest/gtest.h"
#include "tests/engine/fake_model.h"

namespace saturn {
namespace {

SchedulerConfig Config(int max_num_seqs, int max_tokens_per_step, int max_model_len = 2048) {
  SchedulerConfig c;
  c.max_num_seqs = max_num_seqs;
  c.max_num_batched_tokens = max_tokens_per_step;
  c.max_model_len = max_model_len;
  c.eos_token_id = 2;
  // Sim below expects every request to compute its KV from position 0; prefix caching has its
  // own tests (prefix_caching_test.cc).
  c.enable_prefix_caching = false;
  return c;
}

// Prompt of n tokens starting at `first`; ignore_eos so the fake model's tokens never stop it.
GenerateRequest Req(int n, int max_tokens, int first = 10) {
  GenerateRequest r;
  for (int i = 0; i < n; ++i) r.prompt.push_back(first + i);
  r.sampling.max_tokens = max_tokens;
  r.sampling.ignore_eos = true;
  return r;
}

using testing_sched::NextToken;
using testing_sched::Reference;

// Plays the runner: keeps what each request's KV "holds", checks every plan against it and
// feeds back the fake model's tokens.
struct Sim {
  Scheduler sched;
  std::map<int64_t, std::vector<int>> kv;
  std::map<int64_t, std::vector<int>> out;
  std::map<int64_t, RequestUpdate> finished;
  int preemptions = 0;

  Sim(const SchedulerConfig& c, int blocks, int block_size) : sched(c, blocks, block_size) {}

  void Add(int64_t id, const GenerateRequest& r) { sched.Add(id, r); }

  std::vector<RequestUpdate> Feed(const StepPlan& plan) {
    std::vector<int> sampled;
    std::set<int> blocks_in_step;
    for (const ScheduledSeq& s : plan.seqs) {
      std::vector<int>& ctx = kv[s.request_id];
      EXPECT_EQ(s.start_position, static_cast<int>(ctx.size())) << "id " << s.request_id;
      ctx.insert(ctx.end(), s.token_ids.begin(), s.token_ids.end());
      EXPECT_GE(static_cast<int>(s.block_table.size()), sched.blocks().BlocksFor(s.context_len()));
      for (int b : s.block_table) EXPECT_TRUE(blocks_in_step.insert(b).second) << "shared " << b;
      if (s.sample) {
        EXPECT_EQ(s.sample_step, static_cast<int>(out[s.request_id].size()));
        sampled.push_back(NextToken(ctx));
      }
    }
    auto updates = sched.Update(plan, sampled);
    for (const RequestUpdate& u : updates) {
      auto& o = out[u.request_id];
      o.insert(o.end(), u.new_tokens.begin(), u.new_tokens.end());
      if (u.finish != FinishReason::kNone) {
        finished[u.request_id] = u;
        kv.erase(u.request_id);
      }
    }
    return updates;
  }

  // The scheduler's state right after a Schedule() call, before Update.
  struct AfterSchedule {
    int num_waiting = 0, num_running = 0, kv_blocks_used = 0, kv_blocks_free = 0;
  };
  AfterSchedule after;  // of the last Step()

  StepPlan Step() {
    StepPlan plan = sched.Schedule();
    after = {sched.num_waiting(), sched.num_running(), sched.blocks().num_used(),
             sched.blocks().num_free()};
    for (int64_t id : plan.preempted) kv[id].clear();
    preemptions += static_cast<int>(plan.preempted.size());
    EXPECT_LE(plan.num_tokens(), sched.config().max_num_batched_tokens);
    EXPECT_LE(static_cast<int>(plan.seqs.size()), sched.config().max_num_seqs);
    EXPECT_EQ(after.kv_blocks_used + after.kv_blocks_free, sched.blocks().num_blocks());
    Feed(plan);
    return plan;
  }

  void RunAll(int max_steps = 10000) {
    for (int i = 0; i < max_steps && sched.HasWork(); ++i) Step();
    EXPECT_FALSE(sched.HasWork());
  }
};

TEST(SchedulerTest, ChunkedPrefillSharesStepsWithDecodes) {
  Sim sim(Config(8, 8), 64, 4);
  sim.Add(1, Req(3, 10));
  StepPlan p = sim.Step();
  ASSERT_EQ(p.seqs.size(), 1u);
  EXPECT_TRUE(p.seqs[0].is_prefill);
  EXPECT_TRUE(p.seqs[0].sample);
  EXPECT_EQ(p.num_prefill_tokens, 3);

  sim.Add(2, Req(20, 5, 50));
  const int chunk_starts[] = {0, 7, 14};
  for (int step = 0; step < 3; ++step) {
    p = sim.Step();
    ASSERT_EQ(p.seqs.size(), 2u);
    const ScheduledSeq& a = p.seqs[0];
    const ScheduledSeq& b = p.seqs[1];
    EXPECT_EQ(a.request_id, 1);  // running request first
    EXPECT_FALSE(a.is_prefill);
    EXPECT_TRUE(a.sample);
    EXPECT_EQ(a.num_new_tokens(), 1);
    EXPECT_EQ(a.sample_step, step + 1);
    EXPECT_EQ(b.request_id, 2);
    EXPECT_TRUE(b.is_prefill);
    EXPECT_EQ(b.start_position, chunk_starts[step]);
    EXPECT_EQ(b.num_new_tokens(), step < 2 ? 7 : 6);
    EXPECT_EQ(b.token_ids.front(), 50 + chunk_starts[step]);
    EXPECT_EQ(b.sample, step == 2);  // only the chunk ending at the last prompt token
    EXPECT_EQ(p.num_decode_tokens, 1);
    EXPECT_EQ(p.num_prefill_tokens, b.num_new_tokens());
  }
  p = sim.Step();
  ASSERT_EQ(p.seqs.size(), 2u);
  EXPECT_FALSE(p.seqs[1].is_prefill);
  EXPECT_EQ(p.num_decode_tokens, 2);
  sim.RunAll();
  EXPECT_EQ(sim.out[1], Reference(Req(3, 10)));
  EXPECT_EQ(sim.out[2], Reference(Req(20, 5, 50)));
}

TEST(SchedulerTest, MaxNumSeqsIsRespected) {
  Sim sim(Config(2, 1000), 64, 4);
  sim.Add(1, Req(4, 1));
  sim.Add(2, Req(4, 3));
  sim.Add(3, Req(4, 3));
  sim.Add(4, Req(4, 3));
  StepPlan p = sim.Step();
  EXPECT_EQ(p.seqs.size(), 2u);
  EXPECT_EQ(sim.after.num_running, 2);  // state after Schedule(); request 1 finishes in Update
  EXPECT_EQ(sim.after.num_waiting, 2);
  p = sim.Step();  // request 1 finished: one slot opens for request 3
  ASSERT_EQ(p.seqs.size(), 2u);
  EXPECT_EQ(p.seqs[0].request_id, 2);
  EXPECT_EQ(p.seqs[1].request_id, 3);
  EXPECT_EQ(sim.after.num_running, 2);
  sim.RunAll();
  EXPECT_EQ(sim.finished.size(), 4u);
}

TEST(SchedulerTest, AdmitsInArrivalOrderWithoutSkippingAhead) {
  Sim sim(Config(8, 1000), 4, 4);
  sim.Add(7, Req(8, 2));   // 2 blocks
  sim.Add(3, Req(12, 2));  // 3 blocks: does not fit next to 7
  sim.Add(5, Req(2, 2));   // would fit, but must wait behind 3
  StepPlan p = sim.Step();
  ASSERT_EQ(p.seqs.size(), 1u);
  EXPECT_EQ(p.seqs[0].request_id, 7);
  EXPECT_EQ(sim.after.num_waiting, 2);
  sim.Step();  // 7 finishes
  p = sim.Step();
  ASSERT_EQ(p.seqs.size(), 2u);
  EXPECT_EQ(p.seqs[0].request_id, 3);
  EXPECT_EQ(p.seqs[1].request_id, 5);
  sim.RunAll();
  EXPECT_EQ(sim.sched.blocks().num_free(), 4);
}

TEST(SchedulerTest, PreemptsNewestAndRequeuesItAtTheFront) {
  Sim sim(Config(8, 1000), 4, 4);
  for (int id = 1; id <= 4; ++id) sim.Add(id, Req(4, 10, 10 * id));
  StepPlan p = sim.Step();  // each prompt fills one block; 5 known tokens after sampling
  EXPECT_EQ(sim.after.kv_blocks_free, 0);
  p = sim.Step();  // 1 and 2 each need a second block: 4, then 3 are evicted
  EXPECT_EQ(p.preempted, (std::vector<int64_t>{4, 3}));
  ASSERT_EQ(p.seqs.size(), 2u);
  EXPECT_EQ(p.seqs[0].request_id, 1);
  EXPECT_EQ(p.seqs[1].request_id, 2);
  EXPECT_EQ(sim.after.num_running, 2);
  EXPECT_EQ(sim.after.num_waiting, 2);

  // Free the room: 3 (preempted last, so at the very front) recomputes before 4.
  ASSERT_TRUE(sim.sched.Cancel(1));
  ASSERT_TRUE(sim.sched.Cancel(2));
  p = sim.sched.Schedule();
  ASSERT_EQ(p.seqs.size(), 2u);
  EXPECT_EQ(p.seqs[0].request_id, 3);
  EXPECT_EQ(p.seqs[1].request_id, 4);
  for (const ScheduledSeq& s : p.seqs) {
    EXPECT_EQ(s.start_position, 0);
    EXPECT_EQ(s.num_new_tokens(), 5);  // prompt + the one output sampled before eviction
    EXPECT_TRUE(s.is_prefill);
    EXPECT_TRUE(s.sample);
    EXPECT_EQ(s.sample_step, 1);
  }
  auto updates = sim.Feed(p);
  ASSERT_EQ(updates.size(), 2u);
  EXPECT_EQ(updates[0].usage.num_preemptions, 1);
  EXPECT_EQ(updates[0].usage.completion_tokens, 2);
  sim.RunAll();
  EXPECT_EQ(sim.out[3], Reference(Req(4, 10, 30)));
  EXPECT_EQ(sim.out[4], Reference(Req(4, 10, 40)));
}

TEST(SchedulerTest, NewestRunningRequestCanPreemptItself) {
  Sim sim(Config(8, 1000), 3, 4);
  sim.Add(1, Req(3, 4));
  sim.Add(2, Req(8, 4, 40));
  sim.Step();
  StepPlan p = sim.Step();  // 1 fits in its block; 2 needs a third block: none left
  EXPECT_EQ(p.preempted, (std::vector<int64_t>{2}));
  ASSERT_EQ(p.seqs.size(), 1u);
  EXPECT_EQ(p.seqs[0].request_id, 1);
  EXPECT_EQ(sim.after.num_waiting, 1);
  sim.RunAll();
  EXPECT_EQ(sim.out[1], Reference(Req(3, 4)));
  EXPECT_EQ(sim.out[2], Reference(Req(8, 4, 40)));
  EXPECT_EQ(sim.finished[2].usage.num_preemptions, 1);
}

// Same workload with ample KV and with KV so tight that requests keep being preempted:
// greedy outputs must match each other and the unbatched reference.
TEST(SchedulerTest, GreedyOutputsSurvivePreemption) {
  std::vector<GenerateRequest> reqs;
  reqs.reserve(8);
  for (int i = 0; i < 8; ++i) reqs.push_back(Req(5 + 4 * i, 12 + i, 100 * i));
  auto run = [&](int blocks, int budget) {
    Sim sim(Config(6, budget), blocks, 4);
    for (int i = 0; i < 8; ++i) sim.Add(i, reqs[i]);
    sim.RunAll();
    EXPECT_EQ(sim.sched.blocks().num_free(), blocks);
    int reported = 0;
    for (auto& [id, u] : sim.finished) {
      EXPECT_EQ(u.finish, FinishReason::kLength);
      EXPECT_EQ(u.usage.prompt_tokens, static_cast<int>(reqs[id].prompt.size()));
      EXPECT_EQ(u.usage.completion_tokens, reqs[id].sampling.max_tokens);
      reported += u.usage.num_preemptions;
    }
    EXPECT_EQ(reported, sim.preemptions);
    return std::make_pair(sim.out, sim.preemptions);
  };
  auto [ample, ample_preempt] = run(1000, 32);
  auto [tight, tight_preempt] = run(16, 32);  // the longest request needs 13 blocks
  EXPECT_EQ(ample_preempt, 0);
  EXPECT_GT(tight_preempt, 0);
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(ample[i], Reference(reqs[i])) << i;
    EXPECT_EQ(tight[i], ample[i]) << i;
  }
}

TEST(SchedulerTest, CancelReturnsBlocksAtEveryStage) {
  // Waiting (never scheduled).
  Sim sim(Config(8, 6), 8, 4);
  sim.Add(1, Req(10, 5));
  EXPECT_TRUE(sim.sched.Cancel(1));
  EXPECT_FALSE(sim.sched.HasWork());

  // Mid-prefill: first chunk of a 10-token prompt computed.
  sim.Add(2, Req(10, 5));
  StepPlan p = sim.Step();
  EXPECT_FALSE(p.seqs[0].sample);
  EXPECT_GT(sim.sched.blocks().num_used(), 0);
  EXPECT_TRUE(sim.sched.Cancel(2));
  EXPECT_EQ(sim.sched.blocks().num_free(), 8);

  // Mid-decode.
  sim.Add(3, Req(4, 5));
  sim.Step();
  sim.Step();
  EXPECT_EQ(sim.out[3].size(), 2u);
  EXPECT_TRUE(sim.sched.Cancel(3));
  EXPECT_EQ(sim.sched.blocks().num_free(), 8);
  EXPECT_FALSE(sim.sched.Cancel(3));  // already gone

  // Preempted, waiting to recompute.
  sim.Add(4, Req(15, 20));
  sim.Add(5, Req(15, 20, 40));
  for (int i = 0; i < 50 && sim.preemptions == 0; ++i) sim.Step();
  ASSERT_GT(sim.preemptions, 0);
  EXPECT_TRUE(sim.sched.Cancel(5));
  EXPECT_TRUE(sim.sched.Cancel(4));
  EXPECT_EQ(sim.sched.blocks().num_free(), 8);
  EXPECT_FALSE(sim.sched.HasWork());

  // Between Schedule() and Update(): the update skips it.
  sim.Add(6, Req(2, 5));
  sim.Add(7, Req(2, 5, 70));
  p = sim.sched.Schedule();
  ASSERT_EQ(p.seqs.size(), 2u);
  EXPECT_TRUE(sim.sched.Cancel(6));
  auto updates = sim.sched.Update(p, {11, 12});
  ASSERT_EQ(updates.size(), 1u);
  EXPECT_EQ(updates[0].request_id, 7);
  EXPECT_EQ(updates[0].new_tokens, std::vector<int>{12});
  EXPECT_TRUE(sim.sched.Cancel(7));
  EXPECT_EQ(sim.sched.blocks().num_free(), 8);
  EXPECT_FALSE(sim.sched.Cancel(12345));
}

TEST(SchedulerTest, StopConditions) {
  Scheduler s(Config(8, 100, /*max_model_len=*/10), 16, 4);
  auto step = [&](int token) {
    StepPlan p = s.Schedule();
    EXPECT_EQ(p.seqs.size(), 1u);
    auto u = s.Update(p, {token});
    EXPECT_EQ(u.size(), 1u);
    return u.empty() ? RequestUpdate{} : u[0];
  };

  GenerateRequest r = Req(3, 5);
  r.sampling.ignore_eos = false;
  r.sampling.stop_token_ids = {7, 8};
  s.Add(1, r);
  EXPECT_EQ(step(5).finish, FinishReason::kNone);
  RequestUpdate u = step(8);
  EXPECT_EQ(u.finish, FinishReason::kStop);
  EXPECT_EQ(u.new_tokens, std::vector<int>{8});  // the stop token is still reported
  EXPECT_EQ(u.usage.prompt_tokens, 3);
  EXPECT_EQ(u.usage.completion_tokens, 2);
  EXPECT_EQ(s.blocks().num_free(), 16);
  EXPECT_FALSE(s.HasWork());

  s.Add(2, r);  // eos stops unless ignored
  EXPECT_EQ(step(2).finish, FinishReason::kStop);
  r.sampling.ignore_eos = true;
  s.Add(3, r);
  EXPECT_EQ(step(2).finish, FinishReason::kNone);
  EXPECT_TRUE(s.Cancel(3));

  r.sampling.max_tokens = 3;  // max_tokens
  s.Add(4, r);
  EXPECT_EQ(step(5).finish, FinishReason::kNone);
  EXPECT_EQ(step(5).finish, FinishReason::kNone);
  u = step(5);
  EXPECT_EQ(u.finish, FinishReason::kLength);
  EXPECT_EQ(u.usage.completion_tokens, 3);

  s.Add(5, Req(8, 100));  // max_model_len 10 reached after 2 outputs
  EXPECT_EQ(step(5).finish, FinishReason::kNone);
  EXPECT_EQ(step(5).finish, FinishReason::kLength);
  EXPECT_EQ(s.blocks().num_free(), 16);
  EXPECT_FALSE(s.HasWork());
}

TEST(SchedulerTest, MissingSampledTokenFinishesWithError) {
  Scheduler s(Config(8, 100), 16, 4);
  s.Add(1, Req(3, 5));
  auto u = s.Update(s.Schedule(), {});
  ASSERT_EQ(u.size(), 1u);
  EXPECT_EQ(u[0].finish, FinishReason::kError);
  EXPECT_EQ(s.blocks().num_free(), 16);
  EXPECT_FALSE(s.HasWork());
}

TEST(SchedulerTest, SetLimitsAppliesToNextSchedule) {
  Sim sim(Config(8, 100), 64, 4);
  sim.sched.SetLimits(1, 4);
  sim.Add(1, Req(10, 3));
  sim.Add(2, Req(10, 3, 50));
  StepPlan p = sim.Step();
  ASSERT_EQ(p.seqs.size(), 1u);
  EXPECT_EQ(p.seqs[0].num_new_tokens(), 4);
  EXPECT_EQ(sim.sched.config().max_num_seqs, 1);
  sim.sched.SetLimits(2, 100);
  p = sim.Step();
  ASSERT_EQ(p.seqs.size(), 2u);
  EXPECT_EQ(p.seqs[0].num_new_tokens(), 6);
  EXPECT_EQ(p.seqs[1].num_new_tokens(), 10);
  sim.RunAll();
  EXPECT_EQ(sim.out[1], Reference(Req(10, 3)));
}

// Lowering max_num_seqs below the number running bounds the very next step: the newest
// requests pause with their KV kept (no preemption, no recompute) and resume, oldest first,
// as slots free up.
TEST(SchedulerTest, LoweringMaxNumSeqsPausesTheNewestRunning) {
  Sim sim(Config(8, 1000), 64, 4);
  for (int id = 1; id <= 4; ++id) sim.Add(id, Req(4, 3 + id, 10 * id));
  StepPlan p = sim.Step();
  ASSERT_EQ(p.seqs.size(), 4u);
  const int used = sim.sched.blocks().num_used();
  sim.sched.SetLimits(1, 1000);
  p = sim.Step();
  ASSERT_EQ(p.seqs.size(), 1u);
  EXPECT_EQ(p.seqs[0].request_id, 1);
  EXPECT_EQ(sim.after.num_running, 4);  // paused, not preempted
  EXPECT_TRUE(p.preempted.empty());
  EXPECT_GE(sim.sched.blocks().num_used(), used);  // their KV is kept
  // Request 1 runs alone to the end, then 2 (from where it paused: no recompute).
  while (sim.finished.count(1) == 0) {
    p = sim.Step();
    ASSERT_EQ(p.seqs.size(), 1u);
    EXPECT_EQ(p.seqs[0].request_id, 1);
  }
  p = sim.Step();
  ASSERT_EQ(p.seqs.size(), 1u);
  EXPECT_EQ(p.seqs[0].request_id, 2);
  EXPECT_FALSE(p.seqs[0].is_prefill);
  sim.sched.SetLimits(8, 1000);
  p = sim.Step();
  EXPECT_EQ(p.seqs.size(), 3u);
  sim.RunAll();
  EXPECT_EQ(sim.preemptions, 0);
  for (int id = 1; id <= 4; ++id) EXPECT_EQ(sim.out[id], Reference(Req(4, 3 + id, 10 * id)));
  EXPECT_EQ(sim.sched.blocks().num_free(), 64);
}

// Drives `sim` through 3000 seeded random actions (add, with a stop token at 1 in `stop_odds`;
// cancel at `cancel_pct` %; new limits at 3 %; else a step), then runs it dry with the limits
// restored. Returns the ids added; `cancelled` gets those cancelled while still known.
template <class SimT>
std::vector<int64_t> RandomActions(SimT& sim, uint32_t seed, int stop_odds, int cancel_pct,
                                   std::set<int64_t>* cancelled) {
  std::mt19937 rng(seed);
  auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  std::vector<int64_t> ids;
  int64_t next_id = 0;
  for (int i = 0; i < 3000; ++i) {
    const int action = uniform(0, 99);
    if (action < 25) {
      GenerateRequest r = Req(uniform(1, 40), uniform(1, 30), uniform(3, 50));
      if (uniform(0, stop_odds - 1) == 0) r.sampling.stop_token_ids = {uniform(3, 99)};
      sim.Add(next_id, r);
      ids.push_back(next_id++);
    } else if (action < 25 + cancel_pct && !ids.empty()) {
      const int64_t id = ids[uniform(0, static_cast<int>(ids.size()) - 1)];
      if (sim.sched.Cancel(id)) cancelled->insert(id);
      sim.kv.erase(id);
    } else if (action < 28 + cancel_pct) {
      sim.sched.SetLimits(uniform(1, 8), uniform(1, 40));
    } else {
      sim.Step();
    }
    EXPECT_EQ(sim.sched.blocks().num_used() + sim.sched.blocks().num_free(), 24);
  }
  sim.sched.SetLimits(6, 24);
  sim.RunAll();
  EXPECT_EQ(sim.sched.blocks().num_free(), 24) << "seed " << seed;
  EXPECT_GT(sim.preemptions, 0) << "seed " << seed;
  return ids;
}

TEST(SchedulerTest, SeededStressEndsWithAllBlocksFree) {
  for (uint32_t seed : {1u, 2u, 3u}) {
    Sim sim(Config(6, 24, 128), 24, 4);  // longest request: 70 tokens = 18 blocks
    std::set<int64_t> cancelled;
    RandomActions(sim, seed, /*stop_odds=*/4, /*cancel_pct=*/8, &cancelled);
  }
}

// Plays the runner of the engine's overlapped loop: each plan is "launched" (its tokens drawn
// from the fake model, a pending input fed from the previous plan's sampled tokens) before the
// previous plan's Update(), as the engine does while the device runs.
struct PipelinedSim : Sim {
  std::optional<std::pair<StepPlan, std::vector<int>>> in_flight;
  int fed = 0, discarded_rows = 0;
  std::map<int64_t, GenerateRequest> requests;

  PipelinedSim(const SchedulerConfig& c, int blocks, int block_size) : Sim(c, blocks, block_size) {}

  void Add(int64_t id, const GenerateRequest& r) {
    requests[id] = r;
    sched.Add(id, r);
  }

  std::vector<int> Launch(const StepPlan& plan) {
    std::vector<int> sampled;
    for (const ScheduledSeq& s : plan.seqs) {
      std::vector<int>& ctx = kv[s.request_id];
      EXPECT_EQ(s.start_position, static_cast<int>(ctx.size())) << "id " << s.request_id;
      for (int j = 0; j < s.num_new_tokens(); ++j) {
        int t = s.token_ids[j];
        if (t == kPendingToken) {
          EXPECT_EQ(j, s.num_new_tokens() - 1) << "a pending token is only ever the last input";
          EXPECT_TRUE(in_flight.has_value());
          EXPECT_GE(s.feed_from, 0);
          if (!in_flight || s.feed_from < 0 ||
              s.feed_from >= static_cast<int>(in_flight->second.size())) {
            ADD_FAILURE() << "no token to feed";
            t = 0;
          } else {
            t = in_flight->second[s.feed_from];
            ++fed;
          }
        } else if (j == s.num_new_tokens() - 1) {
          EXPECT_EQ(s.feed_from, -1);
        }
        ctx.push_back(t);
      }
      if (s.sample) {
        EXPECT_LT(s.sample_step, s.sampling.max_tokens) << "scheduled past its length";
        sampled.push_back(NextToken(ctx));
      }
    }
    return sampled;
  }

  void Resolve() {
    if (!in_flight) return;
    const auto [plan, sampled] = std::move(*in_flight);
    in_flight.reset();
    std::set<int64_t> updated;
    for (const RequestUpdate& u : sched.Update(plan, sampled)) {
      updated.insert(u.request_id);
      auto& o = out[u.request_id];
      o.insert(o.end(), u.new_tokens.begin(), u.new_tokens.end());
      if (u.finish != FinishReason::kNone) {
        finished[u.request_id] = u;
        kv.erase(u.request_id);
      }
    }
    for (const ScheduledSeq& s : plan.seqs) {
      if (s.sample && !updated.count(s.request_id)) ++discarded_rows;
    }
  }

  // Schedule the next plan while the previous one is in flight, launch it, then update the
  // previous one; with nothing to schedule, drain.
  void Step() {
    StepPlan plan = sched.Schedule();
    for (int64_t id : plan.preempted) kv[id].clear();
    preemptions += static_cast<int>(plan.preempted.size());
    EXPECT_LE(plan.num_tokens(), sched.config().max_num_batched_tokens);
    EXPECT_LE(static_cast<int>(plan.seqs.size()), sched.config().max_num_seqs);
    std::vector<int> sampled;
    if (!plan.empty()) sampled = Launch(plan);
    Resolve();
    if (!plan.empty()) in_flight.emplace(std::move(plan), std::move(sampled));
  }

  void RunAll(int max_steps = 10000) {
    for (int i = 0; i < max_steps && (sched.HasWork() || in_flight); ++i) Step();
    EXPECT_FALSE(sched.HasWork());
  }

  // What the request's stream must be: the fake model's tokens up to max_tokens, or through
  // its first stop token.
  std::vector<int> Expected(int64_t id) const {
    const GenerateRequest& r = requests.at(id);
    std::vector<int> want = Reference(r);
    const auto& stops = r.sampling.stop_token_ids;
    for (size_t i = 0; i < want.size(); ++i) {
      if (std::find(stops.begin(), stops.end(), want[i]) != stops.end()) {
        want.resize(i + 1);
        break;
      }
    }
    return want;
  }
};

TEST(SchedulerTest, DecodeIsScheduledWhileItsTokenIsInFlight) {
  PipelinedSim sim(Config(8, 64), 64, 4);
  sim.Add(1, Req(5, 4));
  sim.Add(2, Req(3, 4, 40));
  sim.Step();  // both prompts: in flight
  ASSERT_TRUE(sim.in_flight.has_value());
  const StepPlan next = sim.sched.Schedule();  // scheduled before the prompts' tokens are known
  ASSERT_EQ(next.seqs.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    const ScheduledSeq& s = next.seqs[i];
    EXPECT_FALSE(s.is_prefill);
    EXPECT_EQ(s.token_ids, std::vector<int>{kPendingToken});
    EXPECT_EQ(s.feed_from, static_cast<int>(i));
    EXPECT_EQ(s.sample_step, 1);
  }
  EXPECT_EQ(next.seqs[0].start_position, 5);
  EXPECT_EQ(next.seqs[1].start_position, 3);
  // The prompts' update lands after the next plan was made: it carries the first tokens.
  const std::vector<int> sampled = sim.Launch(next);
  sim.Resolve();
  sim.in_flight.emplace(next, sampled);
  EXPECT_EQ(sim.out[1].size(), 1u);
  EXPECT_EQ(sim.out[2].size(), 1u);
  sim.RunAll();
  EXPECT_EQ(sim.out[1], sim.Expected(1));
  EXPECT_EQ(sim.out[2], sim.Expected(2));
  EXPECT_EQ(sim.fed, 6);             // tokens 1-3 of both were fed from the step before
  EXPECT_EQ(sim.discarded_rows, 0);  // an end by length is never scheduled ahead
  EXPECT_EQ(sim.sched.blocks().num_free(), 64);
}

TEST(SchedulerTest, ALengthEndFreesItsBlocksBeforeItsTokenLands) {
  PipelinedSim sim(Config(8, 64), 16, 4);
  sim.Add(1, Req(9, 1));  // its first token is its last
  sim.Step();             // the prompt: in flight
  ASSERT_TRUE(sim.in_flight.has_value());
  EXPECT_EQ(sim.sched.blocks().num_free(), 16 - 3);
  const StepPlan next = sim.sched.Schedule();  // as the plain order would, after its update
  EXPECT_TRUE(next.empty());
  EXPECT_EQ(sim.sched.blocks().num_free(), 16);
  EXPECT_EQ(sim.sched.num_running(), 0);
  sim.Resolve();  // the token still arrives and ends it
  EXPECT_EQ(sim.out[1], sim.Expected(1));
  EXPECT_EQ(sim.finished[1].finish, FinishReason::kLength);
  EXPECT_EQ(sim.sched.blocks().num_free(), 16);
  EXPECT_FALSE(sim.sched.HasWork());
}

TEST(SchedulerTest, RowAfterAStopTokenIsDiscarded) {
  PipelinedSim sim(Config(8, 64), 64, 4);
  GenerateRequest r = Req(5, 20);
  const std::vector<int> ref = Reference(r);
  r.sampling.stop_token_ids = {ref[2]};  // the third token stops it
  sim.Add(1, r);
  sim.RunAll();
  EXPECT_EQ(sim.out[1], std::vector<int>(ref.begin(), ref.begin() + 3));
  EXPECT_EQ(sim.finished[1].finish, FinishReason::kStop);
  EXPECT_EQ(sim.finished[1].usage.completion_tokens, 3);
  EXPECT_EQ(sim.discarded_rows, 1);  // its fourth token was drawn ahead and dropped
  EXPECT_EQ(sim.sched.blocks().num_free(), 64);
}

TEST(SchedulerTest, PipelinedStressGivesTheSameStreams) {
  for (uint32_t seed : {11u, 12u, 13u}) {
    PipelinedSim sim(Config(6, 24, 128), 24, 4);
    std::set<int64_t> cancelled;
    const std::vector<int64_t> ids =
        RandomActions(sim, seed, /*stop_odds=*/3, /*cancel_pct=*/5, &cancelled);
    EXPECT_GT(sim.fed, 0) << "seed " << seed;
    EXPECT_GT(sim.discarded_rows, 0) << "seed " << seed;
    int checked = 0;
    for (int64_t id : ids) {
      if (cancelled.count(id)) continue;
      ASSERT_TRUE(sim.finished.count(id)) << "seed " << seed << " id " << id;
      EXPECT_EQ(sim.out[id], sim.Expected(id)) << "seed " << seed << " id " << id;
      EXPECT_EQ(sim.finished[id].usage.completion_tokens, static_cast<int>(sim.out[id].size()));
      ++checked;
    }
    EXPECT_GT(checked, 100) << "seed " << seed;
  }
}

// A list eos_token_id (Llama 3.x Instruct: end of text, end of message, end of turn): every id
// of it stops a request, unless EOS is ignored.
TEST(SchedulerTest, EveryEosIdStops) {
  SchedulerConfig c = Config(8, 100, 64);
  c.extra_eos_token_ids = {11, 12};
  for (const int eos : {2, 11, 12}) {
    Scheduler s(c, 16, 4);
    GenerateRequest r = Req(3, 5);
    r.sampling.ignore_eos = false;
    s.Add(1, r);
    StepPlan p = s.Schedule();
    std::vector<RequestUpdate> u = s.Update(p, {eos});
    ASSERT_EQ(u.size(), 1u);
    EXPECT_EQ(u[0].finish, FinishReason::kStop) << eos;
    r.sampling.ignore_eos = true;
    s.Add(2, r);
    p = s.Schedule();
    u = s.Update(p, {eos});
    ASSERT_EQ(u.size(), 1u);
    EXPECT_EQ(u[0].finish, FinishReason::kNone) << eos;
  }
}

}  // namespace
}  // namespace saturn
