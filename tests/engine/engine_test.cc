// The engine end to end on the CPU backend with the tiny model: events, determinism,
// preemption equivalence, cancellation and KV accounting, options at step boundaries.
#include "engine/engine.h"

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <random>
#include <thread>

#include "engine/model_runner.h"
#include "tests/engine/engine_test_util.h"

namespace saturn {
namespace {

using testing_engine::Req;
using testing_engine::TinyConfig;
using testing_engine::WaitAllBlocksFree;

std::vector<int> Generate(Engine* e, const GenerateRequest& r, TokenEvent* final_ev = nullptr) {
  auto s = RequestStream::Open(e, r);
  EXPECT_TRUE(s.ok()) << s.status();
  if (!s.ok()) return {};
  std::vector<int> tokens;
  TokenEvent last = (*s)->Drain(&tokens);
  if (final_ev) *final_ev = last;
  return tokens;
}

TEST(EngineTest, GeneratesWithUsageTimingsAndFinishReason) {
  auto e = Engine::Create(TinyConfig());
  ASSERT_TRUE(e.ok()) << e.status();
  TokenEvent fin;
  auto tokens = Generate(e->get(), Req(10, 12), &fin);
  EXPECT_EQ(tokens.size(), 12u);
  EXPECT_EQ(fin.finish_reason, FinishReason::kLength);
  EXPECT_EQ(fin.usage.prompt_tokens, 10);
  EXPECT_EQ(fin.usage.completion_tokens, 12);
  EXPECT_GE(fin.timings.first_token_us, fin.timings.first_scheduled_us);
  EXPECT_GE(fin.timings.first_scheduled_us, fin.timings.arrival_us);
  EXPECT_GE(fin.timings.finished_us, fin.timings.first_token_us);
  EXPECT_GT((*e)->steps().total_steps(), 0);
  WaitAllBlocksFree(e->get());
}

TEST(EngineTest, SameSeedSameTokensDifferentSeedDifferentTokens) {
  auto e = Engine::Create(TinyConfig());
  ASSERT_TRUE(e.ok());
  auto a = Generate(e->get(), Req(6, 24, 1.0f, 42));
  auto b = Generate(e->get(), Req(6, 24, 1.0f, 42));
  auto c = Generate(e->get(), Req(6, 24, 1.0f, 43));
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
}

TEST(EngineTest, BatchedGreedyEqualsAlone) {
  auto e = Engine::Create(TinyConfig());
  ASSERT_TRUE(e.ok());
  std::vector<std::vector<int>> alone;
  alone.reserve(6);
  for (int i = 0; i < 6; ++i) alone.push_back(Generate(e->get(), Req(5 + 9 * i, 10)));
  std::vector<std::unique_ptr<RequestStream>> streams;
  streams.reserve(6);
  for (int i = 0; i < 6; ++i) streams.push_back(*RequestStream::Open(e->get(), Req(5 + 9 * i, 10)));
  for (int i = 0; i < 6; ++i) {
    std::vector<int> tokens;
    streams[i]->Drain(&tokens);
    EXPECT_EQ(tokens, alone[i]) << "request " << i;
  }
}

// The event thread changes where callbacks run, never what they see: the same tokens, logprobs,
// usage and order, with the final event last, and the counters already count a request when
// its final event arrives.
TEST(EngineTest, EventThreadOnAndOffDeliverTheSameEvents) {
  struct Seen {
    std::vector<int> tokens;
    std::vector<float> logprobs;
    int events_after_final = 0;
    bool final = false;
    FinishReason reason = FinishReason::kNone;
    int64_t finished_when_final = -1;
  };
  auto run = [](const std::string& mode) {
    EngineConfig c = TinyConfig();
    c.event_thread = mode;
    auto e = Engine::Create(c);
    EXPECT_TRUE(e.ok()) << e.status();
    Engine* engine = e->get();
    constexpr int kRequests = 8;
    std::vector<Seen> seen(kRequests);
    std::mutex mu;
    std::condition_variable cv;
    int done = 0;
    for (int i = 0; i < kRequests; ++i) {
      GenerateRequest r = Req(4 + 7 * i, 6 + i);
      r.sampling.logprobs = 2;
      auto id = engine->Submit(r, [&, i, engine](const TokenEvent& ev) {
        std::lock_guard<std::mutex> lock(mu);
        Seen& s = seen[i];
        if (s.final) ++s.events_after_final;
        s.tokens.insert(s.tokens.end(), ev.token_ids.begin(), ev.token_ids.end());
        for (const PositionLogprobs& lp : ev.logprobs) s.logprobs.push_back(lp.token.logprob);
        if (ev.final) {
          s.final = true;
          s.reason = ev.finish_reason;
          s.finished_when_final = engine->counters().requests_finished;
          ++done;
          cv.notify_all();
        }
      });
      EXPECT_TRUE(id.ok()) << id.status();
    }
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return done == kRequests; });
    return seen;
  };
  std::vector<Seen> on = run("on"), off = run("off"), three = run("3");
  for (size_t i = 0; i < on.size(); ++i) {
    EXPECT_EQ(three[i].tokens, off[i].tokens) << "request " << i;
    EXPECT_EQ(three[i].logprobs, off[i].logprobs) << "request " << i;
    EXPECT_EQ(three[i].events_after_final, 0);
    EXPECT_EQ(on[i].tokens.size(), 6 + i);
    EXPECT_EQ(on[i].tokens, off[i].tokens) << "request " << i;
    EXPECT_EQ(on[i].logprobs, off[i].logprobs) << "request " << i;
    EXPECT_EQ(on[i].logprobs.size(), on[i].tokens.size());
    EXPECT_EQ(on[i].reason, FinishReason::kLength);
    EXPECT_EQ(on[i].events_after_final, 0);
    EXPECT_EQ(off[i].events_after_final, 0);
    EXPECT_GE(on[i].finished_when_final, 1);
  }
}

TEST(EngineTest, EventThreadSettingIsChecked) {
  EngineConfig c = TinyConfig();
  for (const std::string bad : {"sometimes", "0", "17", "-1", "2x"}) {
    c.event_thread = bad;
    auto e = Engine::Create(c);
    ASSERT_FALSE(e.ok()) << bad;
    EXPECT_EQ(e.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(e.status().message().find("event_thread"), std::string::npos) << e.status();
    EXPECT_NE(e.status().message().find("1-16"), std::string::npos) << e.status();
  }
  c.event_thread = "2";
  auto e = Engine::Create(c);
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ((*e)->info().event_threads, 2);
  c.event_thread = "off";
  e = Engine::Create(c);
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ((*e)->info().event_threads, 0);
}

TEST(EngineTest, PreemptionAndRecomputeGiveTheSameGreedyTokens) {
  auto big = Engine::Create(TinyConfig());
  ASSERT_TRUE(big.ok());
  EngineConfig small_cfg = TinyConfig();
  // 16 blocks of 16 tokens: eight requests of ~70 tokens cannot all stay resident.
  small_cfg.kv_cache_bytes =
      16 * ModelRunner::KvBytesPerBlock(*PresetConfig("tiny"), 16, DType::kF32);
  auto small = Engine::Create(small_cfg);
  ASSERT_TRUE(small.ok()) << small.status();
  std::vector<std::unique_ptr<RequestStream>> a, b;
  for (int i = 0; i < 8; ++i) {
    a.push_back(*RequestStream::Open(big->get(), Req(20 + i, 50)));
    b.push_back(*RequestStream::Open(small->get(), Req(20 + i, 50)));
  }
  for (int i = 0; i < 8; ++i) {
    std::vector<int> ta, tb;
    a[i]->Drain(&ta);
    TokenEvent fin = b[i]->Drain(&tb);
    EXPECT_EQ(ta, tb) << "request " << i;
    EXPECT_EQ(fin.finish_reason, FinishReason::kLength);
  }
  EXPECT_GT((*small)->counters().preemptions, 0);
  WaitAllBlocksFree(small->get());
}

TEST(EngineTest, RandomSubmitsAndCancelsLeakNoBlocks) {
  auto e = Engine::Create(TinyConfig());
  ASSERT_TRUE(e.ok());
  std::mt19937 rng(5);
  std::vector<std::unique_ptr<RequestStream>> live;
  int cancelled = 0;
  for (int i = 0; i < 120; ++i) {
    const int action = rng() % 4;
    if (action < 2 || live.empty()) {
      live.push_back(*RequestStream::Open(e->get(), Req(1 + rng() % 60, 1 + rng() % 30)));
    } else {
      const size_t k = rng() % live.size();
      (*e)->Cancel(live[k]->id());
      TokenEvent fin = live[k]->Drain(nullptr);
      cancelled += fin.finish_reason == FinishReason::kCancelled;
      live.erase(live.begin() + k);
    }
    if (rng() % 5 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(rng() % 5));
  }
  live.clear();  // destruction cancels whatever is unfinished
  WaitAllBlocksFree(e->get());
  EXPECT_GT(cancelled, 0);
}

TEST(EngineTest, TemperaturesBelowTheGreedyThresholdSampleGreedily) {
  auto e = Engine::Create(TinyConfig());
  ASSERT_TRUE(e.ok());
  const std::vector<int> greedy = Generate(e->get(), Req(6, 16));
  ASSERT_EQ(greedy.size(), 16u);
  // logits / 1e-38 overflow f32: sampled as such they were NaN and gave token 0 every time.
  for (const float t : {1e-38f, 1e-45f, 1e-6f, kGreedyBelowTemperature / 2}) {
    EXPECT_EQ(Generate(e->get(), Req(6, 16, t, 9)), greedy) << "temperature " << t;
  }
  // At the threshold the request samples (seeded): the same tokens each time.
  EXPECT_EQ(Generate(e->get(), Req(6, 16, kGreedyBelowTemperature, 9)),
            Generate(e->get(), Req(6, 16, kGreedyBelowTemperature, 9)));
}

TEST(EngineTest, CancelWithStopEndsAsStoppedWithItsUsage) {
  auto e = Engine::Create(TinyConfig());
  ASSERT_TRUE(e.ok());
  auto s = RequestStream::Open(e->get(), Req(5, 200));
  ASSERT_TRUE(s.ok()) << s.status();
  std::vector<int> tokens;
  TokenEvent ev;
  while (tokens.size() < 3 && (*s)->Next(&ev)) {
    tokens.insert(tokens.end(), ev.token_ids.begin(), ev.token_ids.end());
  }
  ASSERT_FALSE(ev.final);
  (*e)->Cancel((*s)->id(), FinishReason::kStop);
  const TokenEvent fin = (*s)->Drain(&tokens);
  EXPECT_EQ(fin.finish_reason, FinishReason::kStop);
  EXPECT_EQ(fin.usage.prompt_tokens, 5);
  EXPECT_EQ(fin.usage.completion_tokens, static_cast<int>(tokens.size()));
  EXPECT_LT(tokens.size(), 200u);
  EXPECT_GT(fin.timings.finished_us, 0);
  // Any other reason cancels.
  auto c = RequestStream::Open(e->get(), Req(5, 200));
  ASSERT_TRUE(c.ok());
  (*e)->Cancel((*c)->id(), FinishReason::kLength);
  EXPECT_EQ((*c)->Drain(nullptr).finish_reason, FinishReason::kCancelled);
  WaitAllBlocksFree(e->get());
}

TEST(EngineTest, AContextOfOneTokenIsRefused) {
  EngineConfig c = TinyConfig();
  c.max_model_len = 1;  // served, it refused every request
  auto e = Engine::Create(c);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("max_model_len: 1"), std::string::npos) << e.status();
}

TEST(EngineTest, KvCachePastTheDevicesMemoryIsRefusedByName) {
  // 2^24 MiB wrapped the block count to 256 blocks (1 MiB) and served.
  for (const size_t bytes : {size_t{1} << 44, size_t{1} << 60}) {
    EngineConfig c = TinyConfig();
    c.kv_cache_bytes = bytes;
    auto e = Engine::Create(c);
    ASSERT_FALSE(e.ok()) << bytes;
    EXPECT_NE(e.status().message().find("kv_cache_bytes"), std::string::npos) << e.status();
  }
}

TEST(EngineTest, InvalidRequestsAreRejectedWithTheField) {
  auto e = Engine::Create(TinyConfig());
  ASSERT_TRUE(e.ok());
  GenerateRequest r = Req(4, 4);
  r.sampling.top_p = 1.5f;
  auto s = (*e)->Submit(r, nullptr);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("top_p"), std::string::npos);
  r = Req(200, 100);  // beyond max_model_len 256
  s = (*e)->Submit(r, nullptr);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  // Still serving.
  EXPECT_EQ(Generate(e->get(), Req(3, 3)).size(), 3u);
}

TEST(EngineTest, UpdateOptionsAppliesAtAStepBoundary) {
  auto e = Engine::Create(TinyConfig());
  ASSERT_TRUE(e.ok());
  EngineOptions o = (*e)->options();
  o.max_num_seqs = 3;
  o.max_num_batched_tokens = 32;
  auto applied = (*e)->UpdateOptions(o);
  ASSERT_TRUE(applied.ok()) << applied.status();
  EXPECT_EQ(applied->max_num_seqs, 3);
  std::vector<std::unique_ptr<RequestStream>> streams;
  streams.reserve(6);
  for (int i = 0; i < 6; ++i) streams.push_back(*RequestStream::Open(e->get(), Req(8, 6)));
  for (auto& s : streams) s->Drain(nullptr);
  for (const StepRecord& r : (*e)->steps().Last(1000)) {
    EXPECT_EQ(r.options.max_num_seqs, 3);
    EXPECT_LE(r.num_seqs, 3);
    EXPECT_LE(r.num_prefill_tokens + r.num_decode_tokens, 32);
  }
  o.max_num_seqs = 1000;
  EXPECT_EQ((*e)->UpdateOptions(o).status().code(), absl::StatusCode::kInvalidArgument);
  o.max_num_seqs = 3;
  o.cuda_graphs = true;
  EXPECT_EQ((*e)->UpdateOptions(o).status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(EngineTest, ShutdownEndsEveryRequest) {
  auto e = Engine::Create(TinyConfig());
  ASSERT_TRUE(e.ok());
  std::vector<std::unique_ptr<RequestStream>> streams;
  streams.reserve(5);
  for (int i = 0; i < 5; ++i) streams.push_back(*RequestStream::Open(e->get(), Req(8, 200)));
  (*e)->Shutdown();
  for (auto& s : streams) {
    TokenEvent fin = s->Drain(nullptr);
    EXPECT_TRUE(fin.final);
  }
  EXPECT_EQ((*e)->Submit(Req(3, 3), nullptr).status().code(), absl::StatusCode::kUnavailable);
}

// Speculation needs the plain step loop, and its proposer's n-gram lengths a sane range: both
// refused by name at start.
TEST(EngineTest, SpeculationSettingsAreCheckedAtStart) {
  EngineConfig c = testing_engine::TinyConfig();
  c.options.num_speculative_tokens = 4;
  c.async_scheduling = "on";
  auto e = Engine::Create(c);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("num_speculative_tokens"), std::string::npos) << e.status();
  c.async_scheduling = "auto";
  c.prompt_lookup_min = 5;
  c.prompt_lookup_max = 2;
  e = Engine::Create(c);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("prompt_lookup_min"), std::string::npos) << e.status();
  c.prompt_lookup_min = 1;
  c.options.num_speculative_tokens = 17;
  e = Engine::Create(c);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("num_speculative_tokens: 17 is outside [0, 16]"),
            std::string::npos)
      << e.status();
}

}  // namespace
}  // namespace saturn
