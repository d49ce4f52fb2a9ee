// The overlapped step loop (EngineConfig::async_scheduling): the next step is scheduled before
// the previous one's tokens are known, its pending inputs fed from them. Checked two ways:
// the runner and the real scheduler driven in the loop's order through a backend whose
// downloads land late, as CUDA's do (tests/engine/capturing_backend.h), against the plain
// order; and whole engines with the loop on and off giving the same streams (greedy and seeded
// sampling, logprobs, stop tokens, preemption, cancels), every KV block returned.
#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <condition_variable>
#include <future>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "engine/engine.h"
#include "engine/model_runner.h"
#include "engine/scheduler.h"
#include "tests/engine/capturing_backend.h"
#include "tests/engine/engine_test_util.h"
#include "tests/engine/runner_test_util.h"

namespace saturn {
namespace {

using testing_engine::Req;
using testing_engine::TinyConfig;
using testing_engine::WaitAllBlocksFree;
using testing_runner::CapturingBackend;

// ---- the runner and scheduler in the loop's order ------------------------------------------

struct Streams {
  std::map<int64_t, std::vector<int>> tokens;
  std::map<int64_t, FinishReason> finish;
  int fed = 0;
};

class OverlappedRunnerTest : public ::testing::TestWithParam<bool> {
 protected:
  // Runs `requests` to the end, plain (Schedule, Execute, Update) or overlapped (Schedule the
  // next, Finish the previous, Launch the next, Update the previous), on a fresh runner.
  Streams Run(bool overlapped, bool graphs) {
    auto cpu = CreateBackend("cpu", 1, "f32");
    EXPECT_TRUE(cpu.ok()) << cpu.status();
    CapturingBackend backend(std::move(*cpu));
    backend.async_downloads = overlapped;
    const RunnerConfig rc = testing_runner::SmallRunnerConfig(40, {1, 2, 4});
    auto runner = ModelRunner::Create(&backend, weights_, rc);
    EXPECT_TRUE(runner.ok()) << runner.status();
    if (!runner.ok()) return {};
    if (graphs) EXPECT_TRUE((*runner)->SetUseGraphs(true).ok());
    SchedulerConfig sc;
    sc.max_num_seqs = 4;
    sc.max_num_batched_tokens = 16;  // prompts split in chunks beside decodes
    sc.max_model_len = 64;
    sc.eos_token_id = 2;
    Scheduler sched(sc, 40, 4);
    for (int i = 0; i < 6; ++i) {
      GenerateRequest r = Req(3 + 5 * i, 4 + 3 * i);
      if (i == 3) r.sampling.stop_token_ids = {stop_token_};
      sched.Add(i, r);
    }
    Streams out;
    auto update = [&](const StepPlan& plan, const std::vector<int>& sampled) {
      for (const RequestUpdate& u : sched.Update(plan, sampled)) {
        auto& t = out.tokens[u.request_id];
        t.insert(t.end(), u.new_tokens.begin(), u.new_tokens.end());
        if (u.finish != FinishReason::kNone) out.finish[u.request_id] = u.finish;
      }
    };
    std::optional<StepPlan> in_flight;
    for (int step = 0; step < 200 && (sched.HasWork() || in_flight); ++step) {
      StepPlan plan = sched.Schedule();
      if (!overlapped) {
        auto r = (*runner)->Execute(plan, false);
        EXPECT_TRUE(r.ok()) << r.status();
        if (r.ok()) update(plan, r->sampled);
        continue;
      }
      std::vector<int> prev;
      if (in_flight) {
        auto r = (*runner)->Finish(*in_flight);
        EXPECT_TRUE(r.ok()) << r.status();
        if (r.ok()) prev = r->sampled;
      }
      for (const ScheduledSeq& s : plan.seqs) out.fed += s.feed_from >= 0 ? 1 : 0;
      if (!plan.empty()) {
        absl::Status launched = (*runner)->Launch(plan, false, prev);
        EXPECT_TRUE(launched.ok()) << launched;
      }
      if (in_flight) update(*in_flight, prev);
      in_flight.reset();
      if (!plan.empty()) in_flight = std::move(plan);
    }
    EXPECT_FALSE(sched.HasWork());
    EXPECT_EQ(sched.blocks().num_free(), 40);
    return out;
  }

  void SetUp() override { weights_ = testing_runner::TinyWeights(5, 64); }
  ModelWeights weights_;
  int stop_token_ = -1;
};

TEST_P(OverlappedRunnerTest, FeedsThePendingTokensAndGivesThePlainStreams) {
  const bool graphs = GetParam();
  const Streams plain = Run(false, graphs);
  ASSERT_EQ(plain.tokens.size(), 6u);
  stop_token_ = plain.tokens.at(3).at(2);  // request 3 stops at its third token (or sooner)
  const Streams plain_stop = Run(false, graphs), overlapped = Run(true, graphs);
  EXPECT_GT(overlapped.fed, 20);
  EXPECT_EQ(plain_stop.fed, 0);
  ASSERT_EQ(overlapped.tokens.size(), plain_stop.tokens.size());
  for (const auto& [id, tokens] : plain_stop.tokens) {
    EXPECT_EQ(overlapped.tokens.at(id), tokens) << "request " << id;
    EXPECT_EQ(overlapped.finish.at(id), plain_stop.finish.at(id)) << "request " << id;
  }
  EXPECT_EQ(plain_stop.finish.at(3), FinishReason::kStop);
  EXPECT_LE(plain_stop.tokens.at(3).size(), 3u);
}

INSTANTIATE_TEST_SUITE_P(EagerAndReplayed, OverlappedRunnerTest, ::testing::Bool());

TEST(OverlappedRunner, LaunchAndFinishCheckTheirOrder) {
  const ModelWeights w = testing_runner::TinyWeights(5, 64);
  auto cpu = CreateBackend("cpu", 1, "f32");
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  const RunnerConfig rc = testing_runner::SmallRunnerConfig(16);
  auto runner = ModelRunner::Create(cpu->get(), w, rc);
  ASSERT_TRUE(runner.ok()) << runner.status();
  BlockManager blocks(16, 4);
  const StepPlan plan = testing_runner::WholePromptPlan(blocks, {5, 6, 7});
  EXPECT_EQ((*runner)->Finish(plan).status().code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE((*runner)->Launch(plan, false).ok());
  EXPECT_TRUE((*runner)->launched());
  EXPECT_EQ((*runner)->Launch(plan, false).code(), absl::StatusCode::kFailedPrecondition);
  auto out = (*runner)->Finish(plan);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->sampled.size(), 1u);
  // A pending input with no token of the previous step to feed it is an error, not a guess.
  StepPlan fed = plan;
  fed.seqs[0].feed_from = 1;
  const absl::Status missing = (*runner)->Launch(fed, false, {42});
  EXPECT_EQ(missing.code(), absl::StatusCode::kInternal) << missing;
  EXPECT_FALSE((*runner)->launched());
}

// ---- whole engines, loop on and off --------------------------------------------------------

struct Seen {
  std::vector<int> tokens;
  std::vector<float> logprobs;
  std::vector<float> prompt_logprobs;
  FinishReason reason = FinishReason::kNone;
  int completion_tokens = -1;
  int events_after_final = 0;
  bool final = false;
};

struct EngineRun {
  std::vector<Seen> seen;
  bool async = false;
  int64_t preemptions = 0;
  int64_t steps = 0;          // steps the engine ran
  size_t records = 0;         // step records written
  int overlapping = 0;        // records starting before the previous one ended
  double hidden_host_us = 0;  // summed over the records
};

// Twelve requests at once into a cache too small for all of them (preemptions), four running
// at a time, chunked prompts: greedy and seeded sampling, logprobs, prompt logprobs, and stop
// tokens taken from `stops` (request -> token).
EngineRun RunEngine(const std::string& async, size_t kv_bytes, const std::map<int, int>& stops) {
  EngineConfig c = TinyConfig();
  c.async_scheduling = async;
  c.options.max_num_seqs = 4;
  c.options.max_num_batched_tokens = 32;
  c.kv_cache_bytes = kv_bytes;
  auto e = Engine::Create(c);
  EXPECT_TRUE(e.ok()) << e.status();
  if (!e.ok()) return {};
  Engine* engine = e->get();
  constexpr int kRequests = 12;
  EngineRun run;
  run.async = engine->info().async_scheduling;
  run.seen.resize(kRequests);
  std::mutex mu;
  std::condition_variable cv;
  int done = 0;
  for (int i = 0; i < kRequests; ++i) {
    GenerateRequest r = Req(5 + 9 * i, 10 + 3 * i, i % 3 == 1 ? 0.9f : 0.f, 100 + i);
    if (i % 2 == 0) r.sampling.logprobs = 2;
    if (i % 4 == 3) r.sampling.prompt_logprobs = 1;
    if (auto s = stops.find(i); s != stops.end()) r.sampling.stop_token_ids = {s->second};
    auto id = engine->Submit(r, [&, i](const TokenEvent& ev) {
      std::lock_guard<std::mutex> lock(mu);
      Seen& s = run.seen[i];
      if (s.final) ++s.events_after_final;
      s.tokens.insert(s.tokens.end(), ev.token_ids.begin(), ev.token_ids.end());
      for (const PositionLogprobs& lp : ev.logprobs) s.logprobs.push_back(lp.token.logprob);
      for (const PositionLogprobs& lp : ev.prompt_logprobs) {
        s.prompt_logprobs.push_back(lp.token.logprob);
      }
      if (ev.final) {
        s.final = true;
        s.reason = ev.finish_reason;
        s.completion_tokens = ev.usage.completion_tokens;
        ++done;
        cv.notify_all();
      }
    });
    EXPECT_TRUE(id.ok()) << id.status();
  }
  {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return done == kRequests; });
  }
  WaitAllBlocksFree(engine);
  run.preemptions = engine->counters().preemptions;
  run.steps = engine->counters().steps;
  // The last step's record is pushed just after its events are posted.
  std::vector<StepRecord> records = engine->steps().Since(0);
  for (int i = 0; i < 200 && static_cast<int64_t>(records.size()) < run.steps; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    records = engine->steps().Since(0);
  }
  run.records = records.size();
  for (size_t k = 0; k < records.size(); ++k) {
    run.hidden_host_us += records[k].hidden_host_us;
    if (k > 0 && records[k].start_us < records[k - 1].end_us) ++run.overlapping;
  }
  return run;
}

// Compares two runs request by request, bit for bit (a request preempted at a different step in
// each run is recomputed from different positions; the CPU backend's invariant attention gives
// a row the same bits decoded or recomputed, batch_invariance_test).
void ExpectSameStreams(const EngineRun& on, const EngineRun& off) {
  ASSERT_EQ(on.seen.size(), off.seen.size());
  for (size_t i = 0; i < on.seen.size(); ++i) {
    const Seen &a = on.seen[i], &b = off.seen[i];
    EXPECT_EQ(a.tokens, b.tokens) << "request " << i;
    EXPECT_EQ(a.reason, b.reason) << "request " << i;
    EXPECT_EQ(a.completion_tokens, static_cast<int>(a.tokens.size())) << "request " << i;
    EXPECT_EQ(a.events_after_final, 0) << "request " << i;
    EXPECT_EQ(a.logprobs, b.logprobs) << "request " << i;
    EXPECT_EQ(a.prompt_logprobs, b.prompt_logprobs) << "request " << i;
  }
}

// Stop tokens the plain run meets mid-stream (greedy requests 0, 4 and 8, at their fifth token).
std::map<int, int> StopsFrom(const EngineRun& run) {
  std::map<int, int> stops;
  for (int i : {0, 4, 8}) stops[i] = run.seen.at(i).tokens.at(4);
  return stops;
}

TEST(OverlappedLoop, GivesThePlainLoopsBits) {
  const std::map<int, int> stops = StopsFrom(RunEngine("off", 0, {}));
  const EngineRun off = RunEngine("off", 0, stops), on = RunEngine("on", 0, stops);
  EXPECT_FALSE(off.async);
  EXPECT_TRUE(on.async);
  EXPECT_EQ(on.preemptions, 0);
  EXPECT_EQ(off.preemptions, 0);
  // One record per step, the first of each burst included, and records tile the loop's turns
  // (the analyzer sums their walls). Nothing is hidden where ops run as they are issued.
  for (const EngineRun* r : {&on, &off}) {
    EXPECT_EQ(static_cast<int64_t>(r->records), r->steps);
    EXPECT_EQ(r->overlapping, 0);
    EXPECT_EQ(r->hidden_host_us, 0.0);
  }
  ExpectSameStreams(on, off);
  for (int i : {0, 4, 8}) {
    EXPECT_EQ(on.seen[i].reason, FinishReason::kStop) << "request " << i;
    EXPECT_LE(on.seen[i].tokens.size(), 5u) << "request " << i;
  }
}

TEST(OverlappedLoop, GivesThePlainLoopsBitsThroughPreemptions) {
  // A cache of 24 blocks of 16 tokens: the longest request needs 9, twelve arrive at once.
  size_t per_block = 0;
  {
    auto probe = Engine::Create(TinyConfig());
    ASSERT_TRUE(probe.ok()) << probe.status();
    per_block = (*probe)->info().kv.bytes_per_block;
  }
  const size_t kv = per_block * 24;
  const std::map<int, int> stops = StopsFrom(RunEngine("off", kv, {}));
  const EngineRun off = RunEngine("off", kv, stops), on = RunEngine("on", kv, stops);
  EXPECT_GT(on.preemptions, 0) << "the cache was meant to be too small";
  ExpectSameStreams(on, off);
}

TEST(OverlappedLoop, CancelsInFlightReturnEveryBlock) {
  EngineConfig c = TinyConfig();
  c.async_scheduling = "on";
  auto e = Engine::Create(c);
  ASSERT_TRUE(e.ok()) << e.status();
  Engine* engine = e->get();
  std::mutex mu;
  std::condition_variable cv;
  std::map<int, Seen> seen;
  std::array<std::atomic<int64_t>, 8> ids;
  for (auto& id : ids) id = -1;
  // Each is cancelled from its own event callback once it has 2 + i tokens, so the cancel
  // lands a few steps later whatever the load on the machine, while steps that hold it are in
  // flight (its 200 tokens are far off).
  for (int i = 0; i < 8; ++i) {
    auto id = engine->Submit(Req(4 + i, 200), [&, i, engine](const TokenEvent& ev) {
      std::lock_guard<std::mutex> lock(mu);
      Seen& s = seen[i];
      if (s.final) ++s.events_after_final;
      s.tokens.insert(s.tokens.end(), ev.token_ids.begin(), ev.token_ids.end());
      if (ev.final) {
        s.final = true;
        s.reason = ev.finish_reason;
      } else if (s.tokens.size() >= static_cast<size_t>(2 + i) && ids[i] >= 0) {
        engine->Cancel(ids[i]);  // repeated on later events until it lands: harmless
      }
      cv.notify_all();
    });
    ASSERT_TRUE(id.ok());
    ids[i] = *id;
  }
  {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] {
      for (int i = 0; i < 8; ++i) {
        if (!seen[i].final) return false;
      }
      return true;
    });
  }
  WaitAllBlocksFree(engine);
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(seen[i].reason, FinishReason::kCancelled) << "request " << i;
    EXPECT_LT(seen[i].tokens.size(), 200u);
    EXPECT_EQ(seen[i].events_after_final, 0);
  }
  // Still serving after the cancels.
  std::promise<std::vector<int>> got;
  std::vector<int> tokens;
  auto id = engine->Submit(Req(5, 7), [&](const TokenEvent& ev) {
    tokens.insert(tokens.end(), ev.token_ids.begin(), ev.token_ids.end());
    if (ev.final) got.set_value(tokens);
  });
  ASSERT_TRUE(id.ok());
  EXPECT_EQ(got.get_future().get().size(), 7u);
}

TEST(OverlappedLoop, SettingIsChecked) {
  EngineConfig c = TinyConfig();
  c.async_scheduling = "sometimes";
  auto e = Engine::Create(c);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(e.status().message().find("async_scheduling"), std::string::npos) << e.status();
  // auto follows the backend: the CPU backend runs ops as issued, so the loop stays plain.
  EXPECT_EQ(ResolveAsyncScheduling("auto", false).value(), false);
  EXPECT_EQ(ResolveAsyncScheduling("auto", true).value(), true);
  EXPECT_EQ(ResolveAsyncScheduling("off", true).value(), false);
  EXPECT_EQ(ResolveAsyncScheduling("on", false).value(), true);
  c.async_scheduling = "auto";
  auto cpu = Engine::Create(c);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  EXPECT_FALSE((*cpu)->info().async_scheduling);
}

}  // namespace
}  // namespace saturn
