// Synthetic probe steps (engine/measure/step_probe.h) through a real engine on the CPU backend with
// the tiny model: which sizes are timed, KV capping, blocks returned, serving unchanged after it,
// bad options; what an options change re-probes and how a re-probe merges. No assertion on how long
// a step takes (only that each was timed).
#include "engine/measure/step_probe.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "engine/engine.h"
#include "tests/engine/engine_test_util.h"

namespace saturn {
namespace {

EngineConfig TinyConfig() {
  EngineConfig c = testing_engine::TinyConfig();
  c.max_model_len = 128;
  c.options.max_num_seqs = 8;
  c.options.max_num_batched_tokens = 256;
  return c;
}

std::vector<int> Generate(Engine* e, int prompt, int max_tokens) {
  GenerateRequest r;
  for (int i = 0; i < prompt; ++i) r.prompt.push_back(3 + (i * 37) % 250);
  r.sampling.max_tokens = max_tokens;
  r.sampling.ignore_eos = true;
  auto s = RequestStream::Open(e, r);
  EXPECT_TRUE(s.ok()) << s.status();
  if (!s.ok()) return {};
  std::vector<int> tokens;
  (*s)->Drain(&tokens);
  return tokens;
}

// A budget no test machine reaches: every size is timed `repeats` times.
StepProbeOptions Unbounded(int max_batch, int max_prefill) {
  StepProbeOptions o;
  o.max_batch = max_batch;
  o.max_prefill_tokens = max_prefill;
  o.repeats = 2;
  o.budget_ms = 600000;
  return o;
}

// Prefill chunks, or decode batches at the probe's decode context (after prefill or back to
// back) or, with `long_context`, at its long one.
std::vector<int> Rows(const StepProbe& p, bool prefill, bool after_prefill = false,
                      bool long_context = false) {
  std::vector<int> out;
  const int ctx = long_context ? p.long_context : p.decode_context;
  for (const ProbeSeries& s : p.series) {
    if (s.prefill != prefill || s.after_prefill != after_prefill) continue;
    if (!prefill && s.context != ctx) continue;
    out.push_back(s.rows);
  }
  return out;
}

TEST(StepProbeTest, SizesDoubleAndIncludeTheLast) {
  EXPECT_EQ(ProbeSizes(1, 8), (std::vector<int>{1, 2, 4, 8}));
  EXPECT_EQ(ProbeSizes(1, 12), (std::vector<int>{1, 2, 4, 8, 12}));
  EXPECT_EQ(ProbeSizes(16, 16), (std::vector<int>{16}));
  EXPECT_TRUE(ProbeSizes(16, 8).empty());
  EXPECT_TRUE(ProbeSizes(1, 0).empty());
}

// One row past each power of two from 16 on: the edge of a tiled GEMM's stair.
TEST(StepProbeTest, DecodeSizesAddOneRowPastEachPowerOfTwoFrom16) {
  EXPECT_EQ(DecodeProbeSizes(12), (std::vector<int>{1, 2, 4, 8, 12}));
  EXPECT_EQ(DecodeProbeSizes(16), (std::vector<int>{1, 2, 4, 8, 16}));
  EXPECT_EQ(DecodeProbeSizes(17), (std::vector<int>{1, 2, 4, 8, 16, 17}));
  EXPECT_EQ(DecodeProbeSizes(18), (std::vector<int>{1, 2, 4, 8, 16, 17, 18}));
  EXPECT_EQ(DecodeProbeSizes(64), (std::vector<int>{1, 2, 4, 8, 16, 17, 32, 33, 64}));
  EXPECT_EQ(DecodeProbeSizes(100), (std::vector<int>{1, 2, 4, 8, 16, 17, 32, 33, 64, 65, 100}));
  EXPECT_TRUE(DecodeProbeSizes(0).empty());
}

TEST(StepProbeTest, TimesEveryDecodeBatchAndPrefillChunk) {
  auto e = Engine::Create(TinyConfig());
  ASSERT_TRUE(e.ok()) << e.status();
  const std::vector<int> before = Generate(e->get(), 10, 8);
  auto p = (*e)->ProbeSteps(Unbounded(12, 200));
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(Rows(*p, false), (std::vector<int>{1, 2, 4, 8, 12}));
  // Every decode batch timed again right after a prefill chunk, as a mixed workload runs it,
  // and at a longer context (min(max_model_len - 1, 4 x 64)) on the same sequences grown.
  EXPECT_EQ(Rows(*p, false, true), (std::vector<int>{1, 2, 4, 8, 12}));
  EXPECT_EQ(p->long_context, 127);
  EXPECT_EQ(Rows(*p, false, false, true), (std::vector<int>{1, 2, 4, 8, 12}));
  // Chunks longer than max_model_len (128) span several sequences.
  EXPECT_EQ(Rows(*p, true), (std::vector<int>{16, 32, 64, 128, 200}));
  for (const ProbeSeries& s : p->series) {
    ASSERT_EQ(s.wall_us.size(), 2u) << s.rows;
    for (double us : s.wall_us) EXPECT_GT(us, 0);
    // Per-op timing on (the default): each step's sampling ops timed, within its wall time.
    EXPECT_GT(s.sampling_us, 0) << s.rows;
    EXPECT_LT(s.sampling_us, s.wall_us[0] + s.wall_us[1]) << s.rows;
  }
  EXPECT_FALSE(p->truncated);
  EXPECT_EQ(p->max_batch, 12);
  EXPECT_EQ(p->max_prefill_tokens, 200);
  EXPECT_EQ(p->decode_context, 64);  // min(128, max_model_len / 2)
  ASSERT_TRUE((*e)->step_probe().has_value());
  EXPECT_EQ((*e)->step_probe()->series.size(), p->series.size());
  // Nothing a request sees changed, and every block came back.
  EXPECT_EQ(Generate(e->get(), 10, 8), before);
  testing_engine::WaitAllBlocksFree(e->get());
}

TEST(StepProbeTest, CapsSizesAtTheEngineLimitsAndTheFreeBlocks) {
  EngineConfig c = TinyConfig();
  size_t per_block = 0;
  {
    auto probe_size = Engine::Create(c);
    ASSERT_TRUE(probe_size.ok()) << probe_size.status();
    per_block = (*probe_size)->info().kv.bytes_per_block;
  }
  // 20 blocks of 16 tokens: the 64-token prefill sequence takes 4, each decode sequence
  // (context 16 + 1) takes 2: 8 fit.
  c.kv_cache_bytes = 20 * per_block;
  auto e = Engine::Create(c);
  ASSERT_TRUE(e.ok()) << e.status();
  StepProbeOptions o = Unbounded(64, 64);  // max_batch above max_num_seqs_limit (16)
  o.context = 16;
  auto p = (*e)->ProbeSteps(o);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(Rows(*p, false), (std::vector<int>{1, 2, 4, 8}));
  // Four decode batches after three chunks: the chunks are cycled, each batch still timed.
  EXPECT_EQ(Rows(*p, false, true), (std::vector<int>{1, 2, 4, 8}));
  EXPECT_TRUE(p->truncated);
  testing_engine::WaitAllBlocksFree(e->get());
  EXPECT_EQ(Generate(e->get(), 20, 4).size(), 4u);
}

// Without prefill chunks there is nothing to time a decode step after: no such series.
TEST(StepProbeTest, DecodeOnlyProbeHasNoAfterPrefillSeries) {
  auto e = Engine::Create(TinyConfig());
  ASSERT_TRUE(e.ok()) << e.status();
  auto p = (*e)->ProbeSteps(Unbounded(4, 0));
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(Rows(*p, false), (std::vector<int>{1, 2, 4}));
  EXPECT_TRUE(Rows(*p, false, true).empty());
  EXPECT_TRUE(Rows(*p, true).empty());
  EXPECT_FALSE(p->truncated);
  testing_engine::WaitAllBlocksFree(e->get());
}

// A size timed once during a stall (33 at 2.4x 32) is timed again, and so is the next one
// that then reads stalled beside it (64); a stair (17 past 16) is timed again and keeps its
// time; sizes with all their repeats and sizes in line are not; the budget ends it.
TEST(StepProbeTest, SizesThatGrewFasterThanTheirRowsAreTimedAgain) {
  std::vector<ProbeSeries> s = {{false, 1, 64, {1000, 1010}}, {false, 16, 64, {2000}},
                                {false, 17, 64, {2300}},      {false, 32, 64, {2600, 2700}},
                                {false, 33, 64, {6300}},      {false, 64, 64, {7000}},
                                {false, 65, 64, {4050}}};
  const std::vector<double> truth = {1000, 2000, 2300, 2600, 2650, 4000, 4050};
  std::vector<ProbeSeries*> ptrs;
  for (ProbeSeries& x : s) ptrs.push_back(&x);
  std::vector<size_t> timed;
  auto time = [&](size_t i) -> absl::StatusOr<double> {
    timed.push_back(i);
    s[i].wall_us.push_back(truth[i]);
    return truth[i];
  };
  ASSERT_TRUE(RecheckStalledSizes(ptrs, 3, 1e9, time).ok());
  // 17 (2300 > 2000 x 17/16), 33 until its best is in line, 64 against 33's new best (7000 >
  // 2650 x 64/33); then 65 reads in line with 64's 4000.
  EXPECT_EQ(timed, (std::vector<size_t>{2, 2, 4, 5}));
  EXPECT_EQ(s[2].wall_us, (std::vector<double>{2300, 2300, 2300}));
  EXPECT_EQ(s[4].wall_us, (std::vector<double>{6300, 2650}));
  EXPECT_EQ(s[5].wall_us, (std::vector<double>{7000, 4000}));
  EXPECT_EQ(s[6].wall_us.size(), 1u);
  // A budget that holds one step of 33 but not 64's.
  s[4].wall_us = {6300}, s[5].wall_us = {7000}, s[2].wall_us = {2000};
  timed.clear();
  ASSERT_TRUE(RecheckStalledSizes(ptrs, 3, 6400, time).ok());
  EXPECT_EQ(timed, (std::vector<size_t>{4}));
  // A failing step is the probe's error.
  s[4].wall_us = {6300};
  EXPECT_FALSE(RecheckStalledSizes(ptrs, 3, 1e9, [](size_t) -> absl::StatusOr<double> {
                 return absl::InternalError("step failed");
               }).ok());
}

TEST(StepProbeTest, AZeroBudgetTimesNothing) {
  auto e = Engine::Create(TinyConfig());
  ASSERT_TRUE(e.ok()) << e.status();
  StepProbeOptions o = Unbounded(8, 64);
  o.budget_ms = 0;
  auto p = (*e)->ProbeSteps(o);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_TRUE(p->series.empty());
  EXPECT_TRUE(p->truncated);
}

TEST(StepProbeTest, AReprobeCoversOnlyWhatAnOptionsChangeOpened) {
  StepProbe probe;
  probe.max_batch = 16;
  probe.max_prefill_tokens = 256;
  StepProbeOptions base = Unbounded(16, 999);
  const EngineOptions before{8, 256, false};
  // Nothing new: the same options, a narrower token budget, more sequences (probed already).
  EXPECT_FALSE(ReprobeAfter(before, before, probe, base).has_value());
  EXPECT_FALSE(ReprobeAfter(before, EngineOptions{8, 128, false}, probe, base).has_value());
  EXPECT_FALSE(ReprobeAfter(before, EngineOptions{16, 256, false}, probe, base).has_value());
  // A wider token budget: prefill chunks over the old one only, no decode.
  auto o = ReprobeAfter(before, EngineOptions{8, 1024, false}, probe, base);
  ASSERT_TRUE(o.has_value());
  EXPECT_EQ(o->max_batch, 0);
  EXPECT_EQ(o->min_prefill_tokens, 256);
  EXPECT_EQ(o->max_prefill_tokens, 1024);
  EXPECT_EQ(o->budget_ms, base.budget_ms);
  // A probe that covered more than the old budget starts above what it covered.
  probe.max_prefill_tokens = 512;
  o = ReprobeAfter(before, EngineOptions{8, 1024, false}, probe, base);
  ASSERT_TRUE(o.has_value());
  EXPECT_EQ(o->min_prefill_tokens, 512);
  // Chunks asked for once and left out by the budget are not tried again.
  probe.requested_prefill_tokens = 1024;
  EXPECT_FALSE(
      ReprobeAfter(EngineOptions{8, 128, false}, EngineOptions{8, 1024, false}, probe, base)
          .has_value());
  o = ReprobeAfter(EngineOptions{8, 128, false}, EngineOptions{8, 2048, false}, probe, base);
  ASSERT_TRUE(o.has_value());
  EXPECT_EQ(o->min_prefill_tokens, 1024);
  probe.requested_prefill_tokens = 0;
  // Graphs switched: every decode batch again, no prefill.
  o = ReprobeAfter(before, EngineOptions{8, 256, true}, probe, base);
  ASSERT_TRUE(o.has_value());
  EXPECT_EQ(o->max_batch, 16);
  EXPECT_EQ(o->max_prefill_tokens, 0);
  EXPECT_EQ(o->min_prefill_tokens, 0);
}

TEST(StepProbeTest, MergeKeepsWhatAReprobeDidNotMeasure) {
  StepProbe old;
  old.series = {
      {false, 1, 64, {10}}, {false, 8, 64, {20}}, {true, 16, 0, {30}}, {true, 256, 0, {40}}};
  old.decode_context = 64;
  old.graphs = true;
  old.max_batch = 8;
  old.max_prefill_tokens = 256;
  StepProbe fresh;
  fresh.series = {{true, 512, 0, {50}}, {true, 1024, 0, {60}}};
  fresh.took_ms = 7;
  StepProbeOptions o = Unbounded(0, 1024);
  o.min_prefill_tokens = 256;
  StepProbe m = MergeProbes(old, fresh, o);
  EXPECT_EQ(Rows(m, false), (std::vector<int>{1, 8}));
  EXPECT_EQ(Rows(m, true), (std::vector<int>{16, 256, 512, 1024}));
  EXPECT_EQ(m.max_batch, 8);
  EXPECT_EQ(m.max_prefill_tokens, 1024);
  EXPECT_EQ(m.decode_context, 64);  // decode was not probed again
  EXPECT_TRUE(m.graphs);
  EXPECT_EQ(m.took_ms, 7);
  // A decode re-probe replaces every decode series and keeps the prefill ones.
  StepProbe decode;
  decode.series = {{false, 1, 32, {11}}, {false, 2, 32, {12}}};
  decode.decode_context = 32;
  m = MergeProbes(old, decode, Unbounded(2, 0));
  EXPECT_EQ(Rows(m, false), (std::vector<int>{1, 2}));
  EXPECT_EQ(Rows(m, true), (std::vector<int>{16, 256}));
  EXPECT_EQ(m.decode_context, 32);
  EXPECT_FALSE(m.graphs);
  // A full probe replaces everything.
  m = MergeProbes(old, decode, Unbounded(2, 64));
  EXPECT_EQ(Rows(m, true), std::vector<int>{});
}

TEST(StepProbeTest, AReprobeAddsLongerChunksToTheEnginesProbe) {
  auto e = Engine::Create(TinyConfig());
  ASSERT_TRUE(e.ok()) << e.status();
  ASSERT_TRUE((*e)->ProbeSteps(Unbounded(4, 64)).ok());
  StepProbeOptions o = Unbounded(0, 200);
  o.min_prefill_tokens = 64;
  auto p = (*e)->ProbeSteps(o);
  ASSERT_TRUE(p.ok()) << p.status();
  // Returned and kept: the earlier decode batches (both series) and chunks, and the longer chunks.
  EXPECT_EQ(Rows(*p, false), (std::vector<int>{1, 2, 4}));
  EXPECT_EQ(Rows(*p, false, true), (std::vector<int>{1, 2, 4}));
  EXPECT_EQ(Rows(*p, true), (std::vector<int>{16, 32, 64, 128, 200}));
  EXPECT_EQ(p->max_prefill_tokens, 200);
  EXPECT_EQ(p->requested_prefill_tokens, 200);
  ASSERT_TRUE((*e)->step_probe().has_value());
  EXPECT_EQ(Rows(*(*e)->step_probe(), true), Rows(*p, true));
  testing_engine::WaitAllBlocksFree(e->get());
}

TEST(StepProbeTest, BadOptionsNameTheField) {
  auto e = Engine::Create(TinyConfig());
  ASSERT_TRUE(e.ok()) << e.status();
  StepProbeOptions o;
  o.repeats = 0;
  auto p = (*e)->ProbeSteps(o);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(p.status().message().find("repeats"), std::string::npos);
  o = StepProbeOptions{};
  o.min_prefill_tokens = -1;
  p = (*e)->ProbeSteps(o);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("min_prefill_tokens"), std::string::npos);
  o = StepProbeOptions{};
  o.budget_ms = -1;
  p = (*e)->ProbeSteps(o);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("budget_ms"), std::string::npos);
}

TEST(StepProbeTest, AfterShutdownIsUnavailable) {
  auto e = Engine::Create(TinyConfig());
  ASSERT_TRUE(e.ok()) << e.status();
  (*e)->Shutdown();
  auto p = (*e)->ProbeSteps(Unbounded(2, 16));
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace saturn
