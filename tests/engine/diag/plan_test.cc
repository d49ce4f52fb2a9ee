// The saturation plan on hand-built windows: each action, its predictions and each failure
// mode that bounds it. No timing.
#include <gtest/gtest.h>

#include "absl/strings/str_format.h"
#include "engine/diag/analyzer.h"
#include "proto/render/report_proto.h"
#include "proto/render/report_text.h"
#include "tests/engine/diag/synthetic.h"

namespace saturn {
namespace {

using testing_diag::StepSpec;
using testing_diag::TrueModel;

// Memory-bound decode at batch 4 = max_num_seqs with `waiting` requests queued.
std::vector<StepRecord> MemoryBoundAt4(int waiting) {
  StepSpec s;
  s.seqs = 4;
  s.queue_depth = waiting;
  s.max_num_seqs = 4;
  return testing_diag::Steps(testing_diag::Small(), TrueModel{}, s, 10);
}

// A mixed window at max_num_seqs 4 with requests queued: a step carrying a 64-token prefill
// chunk, then 7 decode steps, 8 times.
std::vector<StepRecord> MixedAt4() {
  std::vector<StepRecord> steps;
  StepSpec pre, dec;
  pre.seqs = dec.seqs = 4;
  pre.max_num_seqs = dec.max_num_seqs = 4;
  pre.queue_depth = dec.queue_depth = 40;
  pre.prefill_tokens = 64;
  for (int i = 0; i < 8; ++i) {
    const double at = steps.empty() ? 0 : steps.back().end_us;
    steps.push_back(testing_diag::MakeStep(testing_diag::Small(), TrueModel{}, pre, at));
    for (int j = 0; j < 7; ++j) {
      steps.push_back(
          testing_diag::MakeStep(testing_diag::Small(), TrueModel{}, dec, steps.back().end_us));
    }
  }
  return steps;
}

DiagnosticsReport Plan(const std::vector<StepRecord>& steps, const AnalyzerContext& ctx) {
  return Analyze(steps, steps.front().start_us, steps.back().end_us,
                 testing_diag::TestCalibration(), ctx);
}

const FailureMode* FindMode(const Action& a, const std::string& name) {
  for (const FailureMode& f : a.tradeoffs) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

TEST(PlanTest, MemoryBoundWithWaitingRequestsRaisesMaxNumSeqs) {
  const auto r = Plan(MemoryBoundAt4(40), testing_diag::TestContext(testing_diag::Small(), 4));
  EXPECT_EQ(r.verdict.bottleneck, Bottleneck::kMemoryBound);
  ASSERT_FALSE(r.plan.actions.empty());
  const Action& a = r.plan.actions[0];
  EXPECT_EQ(a.kind, ActionKind::kRaiseMaxNumSeqs);
  EXPECT_EQ(a.from, 4);
  // The true model turns compute-bound near B* = ridge (10) x 4 bytes / 2 = 20.
  EXPECT_GE(a.to, 14);
  EXPECT_LE(a.to, 32);
  EXPECT_EQ(a.options_after.max_num_seqs, a.to);
  EXPECT_GT(a.tokens_per_s_after, 3 * a.tokens_per_s_before);
  EXPECT_GE(a.tpot_ms_after, a.tpot_ms_before);
  // Only batch 4 was measured (no probe): the figures reach past it too far to be stated, so
  // the report gives the measurement instead, and no latency line.
  EXPECT_GT(a.expected_error, 0.5);
  EXPECT_NE(a.settle_by.find("saturn-diag apply"), std::string::npos) << a.settle_by;
  EXPECT_EQ(FindMode(a, "latency"), nullptr);
  // The prediction at batch 4 matches the measured steps (the model fits them exactly).
  EXPECT_NEAR(a.tpot_ms_before, r.profile.mean_decode_step_ms, 0.01 * a.tpot_ms_before);
  EXPECT_EQ(r.plan.plateau_batch, a.to);
}

TEST(PlanTest, KvCapacityCapsTheBatch) {
  auto ctx = testing_diag::TestContext(testing_diag::Small(), 4);
  ctx.kv_num_blocks = 130;  // sequences of ~200 tokens take 13 blocks: 10 fit
  const auto r = Plan(MemoryBoundAt4(40), ctx);
  ASSERT_FALSE(r.plan.actions.empty());
  const Action& a = r.plan.actions[0];
  EXPECT_EQ(r.plan.kv_capacity_batch, 10);
  EXPECT_EQ(a.to, 10);
  const FailureMode* kv = FindMode(a, "kv_preemption");
  ASSERT_NE(kv, nullptr);
  EXPECT_EQ(kv->at, 10);
}

TEST(PlanTest, ProbedStepsPutPredictionsInsideTheMeasuredRange) {
  const std::vector<StepRecord> steps = MemoryBoundAt4(40);
  auto ctx = testing_diag::TestContext(testing_diag::Small(), 4);
  const auto without = Plan(steps, ctx);
  ASSERT_FALSE(without.plan.actions.empty());
  EXPECT_TRUE(without.plan.actions[0].outside_measured);  // the window saw batch 4 only
  EXPECT_FALSE(without.plan.used_probe);
  // Probed decode steps, linear in the batch, half as long as the window's (a quieter
  // machine): the plan carries the window's own step at batch 4 to them. One measured batch
  // cannot tell a share of each step from a time per step, so the prediction lies between the
  // two readings and its interval holds the truth (the share).
  const double t4 = steps[0].wall_us();
  auto truth = [&](double b) { return t4 * (1 + 0.1 * (b - 4)); };
  for (double b : {1, 2, 4, 8, 16, 32, 64}) {
    ctx.probe_curve.decode.push_back(CurvePoint{b, 0.5 * truth(b), 0.01, 3});
  }
  const auto with = Plan(steps, ctx);
  ASSERT_FALSE(with.plan.actions.empty());
  const Action& a = with.plan.actions[0];
  EXPECT_TRUE(with.plan.used_probe);
  EXPECT_EQ(with.plan.measured_max_batch, 64);
  EXPECT_FALSE(a.outside_measured);
  const double true_tps = a.batch_after / truth(a.batch_after) * 1e6;
  EXPECT_GT(a.tokens_per_s_after, true_tps);  // the time-per-step reading is faster
  EXPECT_LT(a.tokens_per_s_after, 2 * true_tps);
  EXPECT_NEAR(a.tokens_per_s_after, true_tps, a.expected_error * a.tokens_per_s_after);
  EXPECT_LT(a.expected_error, without.plan.actions[0].expected_error);
  const std::string with_text = RenderReport(ToProto(with));
  const std::string without_text = RenderReport(ToProto(without));
  EXPECT_NE(with_text.find("decode batch <= 64, prefill rows <= 0 (window + probe steps)"),
            std::string::npos)
      << with_text;
  EXPECT_NE(without_text.find("decode batch <= 4, prefill rows <= 0 (window only)"),
            std::string::npos)
      << without_text;
  // Probed with the other CUDA-graph setting: not used.
  ctx.probe_graphs = true;
  const auto other = Plan(steps, ctx);
  EXPECT_FALSE(other.plan.used_probe);
  EXPECT_TRUE(other.plan.actions[0].outside_measured);
}

// Requests sampled at a temperature: each row's sampling took 600 us more than a greedy row's
// (a softmax and a walk down the vocabulary), which the probe's greedy steps did not pay. The
// plan adds it per row to the probed steps, so the batch it plans for carries it too; a ratio
// would have carried only 4 rows' worth of it.
TEST(PlanTest, RequestsSamplingCostIsAddedToProbedStepsPerRow) {
  std::vector<StepRecord> steps = MemoryBoundAt4(40);
  auto ctx = testing_diag::TestContext(testing_diag::Small(), 4);
  const double greedy4 = steps[0].wall_us();
  auto truth = [&](double b) { return greedy4 * (1 + 0.1 * (b - 4)); };
  for (double b : {1, 2, 4, 8, 16, 32, 64}) {
    ctx.probe_curve.decode.push_back(CurvePoint{b, truth(b), 0.01, 3});
  }
  const double greedy_row =
      steps[0].by_class[static_cast<size_t>(OpClass::kSampling)].device_us / steps[0].num_sampled;
  ctx.probe_sampling = {CurvePoint{1, greedy_row, 0, 3}, CurvePoint{64, greedy_row, 0, 3}};
  constexpr double kPerRow = 600;
  double shift = 0;
  for (StepRecord& r : steps) {
    r.start_us += shift;
    r.by_class[static_cast<size_t>(OpClass::kSampling)].device_us += kPerRow * r.num_sampled;
    shift += kPerRow * r.num_sampled;
    r.end_us += shift;
  }
  const auto with = Plan(steps, ctx);
  EXPECT_NEAR(with.plan.sampling_gap_us_per_row, kPerRow, 0.02 * kPerRow);
  ASSERT_FALSE(with.plan.actions.empty());
  const Action& a = with.plan.actions[0];
  const double b = a.batch_after;
  EXPECT_GT(b, 4);
  EXPECT_NEAR(a.tpot_ms_after * 1e3, truth(b) + kPerRow * b, 0.03 * (truth(b) + kPerRow * b));
  EXPECT_NE(RenderReport(ToProto(with)).find("the requests' sampling"), std::string::npos);
  // Greedy requests (no extra sampling time): nothing added.
  EXPECT_EQ(Plan(MemoryBoundAt4(40), ctx).plan.sampling_gap_us_per_row, 0);
}

// A mixed window (MixedAt4): probed decode steps that follow a prefill chunk ran 1.3x the
// back-to-back ones, so the plan's mix prediction (most decode steps follow a prefill at the larger
// batch) is lower than with no such series; a decode-only window's prediction does not change.
TEST(PlanTest, DecodeStepsAfterPrefillLowerTheMixPrediction) {
  const std::vector<StepRecord> steps = MixedAt4();
  auto ctx = testing_diag::TestContext(testing_diag::Small(), 4);
  ctx.mean_prompt_tokens = 64;
  ctx.mean_output_tokens = 64;
  const double t4 = steps[1].wall_us();
  for (double b : {1, 2, 4, 8, 16, 32, 64}) {
    ctx.probe_curve.decode.push_back(CurvePoint{b, t4 * (1 + 0.1 * (b - 4)), 0.01, 3});
  }
  for (double x : {16, 64, 256}) {
    ctx.probe_curve.prefill.push_back(CurvePoint{x, 3 * t4 * x / 64, 0.01, 3});
  }
  const auto plain = Plan(steps, ctx);
  auto slow_after = ctx;
  for (CurvePoint p : ctx.probe_curve.decode) {
    p.us *= 1.3;
    slow_after.probe_curve.decode_after_prefill.push_back(p);
  }
  const auto slow = Plan(steps, slow_after);
  ASSERT_FALSE(plain.plan.actions.empty());
  ASSERT_FALSE(slow.plan.actions.empty());
  const Action& a = plain.plan.actions[0];
  const Action& b = slow.plan.actions[0];
  ASSERT_EQ(a.kind, b.kind);
  EXPECT_GT(b.prefill_share, 0);  // the mix model made the prediction
  EXPECT_LT(b.tokens_per_s_after, 0.97 * a.tokens_per_s_after);
  EXPECT_TRUE(plain.plan.curve.decode_after_prefill.empty() ||
              plain.plan.curve.decode_after_prefill.size() == 1);  // the window's own, batch 4
  EXPECT_GE(slow.plan.curve.decode_after_prefill.size(), 7u);
  EXPECT_EQ(ToProto(slow).plan_curve().decode_after_prefill_size(),
            int(slow.plan.curve.decode_after_prefill.size()));
  // Decode-only: no step follows a prefill, the back-to-back curve decides.
  auto decode_only = testing_diag::TestContext(testing_diag::Small(), 4);
  decode_only.probe_curve.decode = ctx.probe_curve.decode;
  const auto d0 = Plan(MemoryBoundAt4(40), decode_only);
  decode_only.probe_curve.decode_after_prefill = slow_after.probe_curve.decode_after_prefill;
  const auto d1 = Plan(MemoryBoundAt4(40), decode_only);
  ASSERT_FALSE(d0.plan.actions.empty());
  ASSERT_FALSE(d1.plan.actions.empty());
  EXPECT_DOUBLE_EQ(d1.plan.actions[0].tokens_per_s_after, d0.plan.actions[0].tokens_per_s_after);
}

// Probed decode points are moved from the probe's context to the mix's by the measured slope
// per context token where the probe has one: a steeper slope, a slower curve at the mix's
// longer context (relative to the window's batch 4, which moves by the slope too), a lower
// prediction.
TEST(PlanTest, MeasuredContextSlopeMovesProbedDecodePoints) {
  const std::vector<StepRecord> steps = MixedAt4();
  auto ctx = testing_diag::TestContext(testing_diag::Small(), 4);
  ctx.mean_prompt_tokens = 256;
  ctx.mean_output_tokens = 64;  // the plan's context: 256 + 32
  ctx.probe_context = 32;
  const double t4 = steps[1].wall_us();
  for (double b : {1, 2, 4, 8, 16, 32, 64}) {
    ctx.probe_curve.decode.push_back(CurvePoint{b, t4 * (1 + 0.1 * (b - 4)), 0.01, 3});
  }
  auto gentle = ctx, steep = ctx;
  for (double b : {1, 4, 16, 64}) {
    gentle.probe_context_slopes.push_back(CurvePoint{b, 0.2 * b, 0, 3});
    steep.probe_context_slopes.push_back(CurvePoint{b, 2 * b, 0, 3});
  }
  const auto flat = Plan(steps, gentle);
  const auto slow = Plan(steps, steep);
  ASSERT_FALSE(flat.plan.actions.empty());
  ASSERT_FALSE(slow.plan.actions.empty());
  ASSERT_FALSE(flat.plan.curve.decode.empty());
  const CurvePoint& f = flat.plan.curve.decode.back();
  const CurvePoint& g = slow.plan.curve.decode.back();
  ASSERT_EQ(f.x, 64);
  ASSERT_EQ(g.x, 64);
  EXPECT_GT(g.us, f.us);
  EXPECT_LT(slow.plan.actions[0].tokens_per_s_after, flat.plan.actions[0].tokens_per_s_after);
}

TEST(PlanTest, ConfiguredLimitCapsTheBatch) {
  auto ctx = testing_diag::TestContext(testing_diag::Small(), 4);
  ctx.max_num_seqs_limit = 8;
  const auto r = Plan(MemoryBoundAt4(40), ctx);
  ASSERT_FALSE(r.plan.actions.empty());
  EXPECT_EQ(r.plan.actions[0].to, 8);
  EXPECT_NE(FindMode(r.plan.actions[0], "configured_limit"), nullptr);
}

TEST(PlanTest, QueueDemandBoundsTheBatchAndAsksForMoreClients) {
  const auto r = Plan(MemoryBoundAt4(2), testing_diag::TestContext(testing_diag::Small(), 4));
  ASSERT_EQ(r.plan.actions.size(), 3u);
  const Action& raise = r.plan.actions[0];
  EXPECT_EQ(raise.kind, ActionKind::kRaiseMaxNumSeqs);
  EXPECT_EQ(raise.batch_after, 6);  // 4 running + 2 waiting
  const FailureMode* q = FindMode(raise, "queue_demand");
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->at, 6);
  const Action& clients = r.plan.actions[1];
  EXPECT_EQ(clients.kind, ActionKind::kRaiseClientConcurrency);
  EXPECT_EQ(clients.to, raise.to);
  EXPECT_GT(clients.tokens_per_s_after, raise.tokens_per_s_after);
  // At that batch the f32 GEMMs still stream their weights (under the ridge): fewer bytes per
  // weight, predicted from where the clients' action leaves the server.
  const Action& quantize = r.plan.actions[2];
  EXPECT_EQ(quantize.kind, ActionKind::kQuantizeWeights);
  EXPECT_EQ(quantize.batch_after, clients.batch_after);
  EXPECT_NEAR(quantize.tokens_per_s_before, clients.tokens_per_s_after,
              1e-9 * clients.tokens_per_s_after);
}

TEST(PlanTest, TpotObjectiveCapsTheBatch) {
  auto ctx = testing_diag::TestContext(testing_diag::Small(), 4);
  const auto free = Plan(MemoryBoundAt4(40), ctx);
  ASSERT_FALSE(free.plan.actions.empty());
  const Action& a = free.plan.actions[0];
  ctx.tpot_slo_ms = 0.5 * (a.tpot_ms_before + a.tpot_ms_after);
  const auto r = Plan(MemoryBoundAt4(40), ctx);
  ASSERT_FALSE(r.plan.actions.empty());
  const Action& b = r.plan.actions[0];
  EXPECT_LT(b.to, a.to);
  EXPECT_LE(b.tpot_ms_after, ctx.tpot_slo_ms);
  EXPECT_NE(FindMode(b, "tpot_slo"), nullptr);
}

TEST(PlanTest, UnderloadedServerAsksForClientConcurrency) {
  StepSpec s;  // each request arrives after a pause and is served in one prefill step
  s.running = 1;
  s.prefill_tokens = 8;
  const auto steps = testing_diag::Steps(testing_diag::Small(), TrueModel{}, s, 5, 200000);
  const auto r = Analyze(steps, 0, steps.back().end_us + 200000, testing_diag::TestCalibration(),
                         testing_diag::TestContext(testing_diag::Small(), 64));
  ASSERT_EQ(r.plan.actions.size(), 2u);
  const Action& a = r.plan.actions[0];
  EXPECT_EQ(a.kind, ActionKind::kRaiseClientConcurrency);
  EXPECT_GE(a.to, 14);
  // Before is what the window delivered, idle time included.
  EXPECT_NEAR(a.tokens_per_s_before, r.profile.output_tokens_per_s, 1e-9);
  EXPECT_GT(a.tokens_per_s_after, 10 * a.tokens_per_s_before);
  // Then fewer bytes per weight at the batch the clients bring (f32 weights, under the ridge).
  EXPECT_EQ(r.plan.actions[1].kind, ActionKind::kQuantizeWeights);
  EXPECT_EQ(r.plan.actions[1].batch_after, a.batch_after);
}

// `cycles` times: a step carrying one request's `prompt` tokens beside the others' decodes,
// 7 decode steps of `seqs` sequences, then `pause_us` with no step. max_num_seqs 64.
std::vector<StepRecord> Cycles(int cycles, int seqs, int prompt, double pause_us) {
  std::vector<StepRecord> steps;
  double at = 0;
  for (int cycle = 0; cycle < cycles; ++cycle) {
    for (int i = 0; i < 8; ++i) {
      StepSpec s;
      s.seqs = seqs;
      s.max_num_seqs = 64;
      s.prefill_tokens = i == 0 ? prompt : 0;
      steps.push_back(
          testing_diag::MakeStep(testing_diag::Small(), TrueModel{}, s, at, int64_t(steps.size())));
      at = steps.back().end_us;
    }
    at += pause_us;
  }
  return steps;
}

// A window at batch 1 alone, planned to 14 and more in flight: the prediction extrapolates
// four doublings past the measured steps (+-100 %), so the plan states no number and names
// the run that would measure it. With probed steps up to batch 64 the same action is predicted.
TEST(PlanTest, PredictionTooFarPastTheMeasuredStepsIsNotStated) {
  // One request at a time: its 8-token prompt, 7 decode steps, then a pause.
  const std::vector<StepRecord> steps = Cycles(5, 1, 8, 200000);
  const double at = steps.back().end_us + 200000;
  auto ctx = testing_diag::TestContext(testing_diag::Small(), 64);
  const auto r = Analyze(steps, 0, at, testing_diag::TestCalibration(), ctx);
  ASSERT_FALSE(r.plan.actions.empty());
  const Action& a = r.plan.actions[0];
  ASSERT_EQ(a.kind, ActionKind::kRaiseClientConcurrency);
  EXPECT_TRUE(a.outside_measured);
  EXPECT_GT(a.expected_error, 0.5);
  EXPECT_NE(a.untrusted.find(absl::StrFormat("decode batch %.0f lies past the measured steps "
                                             "(batch <= 1)",
                                             a.batch_after)),
            std::string::npos)
      << a.untrusted;
  EXPECT_NE(a.settle_by.find(absl::StrFormat("run the load at %.0f in-flight requests", a.to)),
            std::string::npos)
      << a.settle_by;
  const std::string text = RenderReport(ToProto(r));
  EXPECT_NE(text.find("no trusted prediction: expected error"), std::string::npos) << text;
  EXPECT_NE(text.find("to settle it: run the load at"), std::string::npos) << text;
  const std::string row =
      text.substr(text.find(a.what), text.find("no trusted") - text.find(a.what));
  EXPECT_EQ(row.find(absl::StrFormat("%.1f", a.tokens_per_s_after)), std::string::npos) << row;
  EXPECT_EQ(text.find("TPOT/ITL"), std::string::npos) << text;  // no latency prediction either
  EXPECT_EQ(ToProto(r).plan(0).untrusted(), a.untrusted);

  const double t1 = steps[0].wall_us();
  for (double b : {1, 2, 4, 8, 16, 32, 64}) {
    ctx.probe_curve.decode.push_back(CurvePoint{b, 0.5 * t1 * (1 + 0.05 * (b - 1)), 0.01, 3});
    ctx.probe_curve.prefill.push_back(CurvePoint{8 * b, 0.5 * t1 * (1 + 0.1 * b), 0.01, 3});
  }
  const auto probed = Analyze(steps, 0, at, testing_diag::TestCalibration(), ctx);
  ASSERT_FALSE(probed.plan.actions.empty());
  EXPECT_EQ(probed.plan.actions[0].kind, ActionKind::kRaiseClientConcurrency);
  EXPECT_LE(probed.plan.actions[0].expected_error, 0.5);
  EXPECT_TRUE(probed.plan.actions[0].untrusted.empty()) << probed.plan.actions[0].untrusted;
  EXPECT_TRUE(probed.plan.actions[0].settle_by.empty());
}

// Two clients with long prompts and short outputs: the steps carrying the prompts hold the
// window at the compute roof, the decode steps between them run 2 sequences far under the
// ridge. More clients share those decode steps, so the plan asks for them.
// Two clients, 4 cycles of a step carrying one request's 256-token prompt, then 7 decode steps.
std::vector<StepRecord> PromptThenDecodes() { return Cycles(4, 2, 256, 0); }

TEST(PlanTest, PrefillHeavyComputeBoundWindowStillAsksForClientConcurrency) {
  const auto m = testing_diag::Small();
  const std::vector<StepRecord> steps = PromptThenDecodes();
  AnalyzerContext ctx = testing_diag::TestContext(m, 64);
  ctx.mean_prompt_tokens = 256;
  ctx.mean_output_tokens = 8;
  ctx.num_running = 2;
  const auto r = Plan(steps, ctx);
  ASSERT_EQ(r.verdict.step_bound, Bottleneck::kComputeBound) << r.verdict.summary;
  ASSERT_FALSE(r.plan.actions.empty()) << r.plan.note << " / " << r.verdict.summary;
  const Action& a = r.plan.actions.back();
  EXPECT_EQ(a.kind, ActionKind::kRaiseClientConcurrency);
  EXPECT_GT(a.to, 2);
  EXPECT_GE(a.tokens_per_s_after, 1.05 * a.tokens_per_s_before);
  EXPECT_NE(FindMode(a, "prefill_compute"), nullptr);
  EXPECT_NE(FindMode(a, "workload_mix"), nullptr);
}

// The prefill-heavy window above, with prefix caching off and each admitted prompt found in
// cached blocks but `missed` of it recomputed.
std::vector<StepRecord> RepeatedPromptsCachingOff(double missed) {
  std::vector<StepRecord> steps = PromptThenDecodes();
  for (StepRecord& r : steps) {
    r.options.prefix_caching = false;
    if (r.num_prefill_tokens > 0) {
      r.prefix_query_tokens = 256;
      r.prefix_hit_tokens = static_cast<int>(256 * missed);
    }
  }
  return steps;
}

AnalyzerContext RepeatedPromptsContext(bool caching) {
  AnalyzerContext ctx = testing_diag::TestContext(testing_diag::Small(), 64);
  ctx.mean_prompt_tokens = 256;
  ctx.mean_output_tokens = 8;
  ctx.num_running = 2;
  ctx.options.prefix_caching = caching;
  return ctx;
}

// A compute-bound window whose prompts were 7/8 in the cache: the first action turns caching
// on, predicted from the request mix with 1/8 of each prompt computed; the rules after it plan
// with that mix, and the report shows the reuse missed.
TEST(PlanTest, RepeatedPromptsWithCachingOffTurnItOnFirst) {
  const auto steps = RepeatedPromptsCachingOff(0.875);
  const auto r = Plan(steps, RepeatedPromptsContext(false));
  EXPECT_NEAR(r.profile.prefix_missed_rate, 0.875, 1e-9);
  EXPECT_EQ(r.profile.prefix_hit_rate, 0);
  EXPECT_GT(r.profile.prefill_step_share, 0.3);
  ASSERT_FALSE(r.plan.actions.empty()) << r.plan.note;
  const Action& a = r.plan.actions.front();
  EXPECT_EQ(a.kind, ActionKind::kEnablePrefixCaching) << a.what;
  EXPECT_TRUE(a.options_after.prefix_caching);
  EXPECT_NEAR(a.to, 32, 1e-9);  // prompt tokens computed per request: 256 -> 32
  EXPECT_GE(a.tokens_per_s_after, 1.5 * a.tokens_per_s_before);
  EXPECT_LT(a.prefill_share, 0.5);
  EXPECT_NE(FindMode(a, "kv_reuse"), nullptr);
  for (size_t i = 1; i < r.plan.actions.size(); ++i) {
    EXPECT_TRUE(r.plan.actions[i].options_after.prefix_caching) << r.plan.actions[i].what;
  }
  const v1::DiagnosticsReport proto = ToProto(r);
  EXPECT_EQ(proto.plan(0).kind(), "enable_prefix_caching");
  EXPECT_TRUE(proto.plan(0).prefix_caching());
  const std::string text = RenderReport(proto);
  EXPECT_NE(text.find("prefix cache: OFF, 88% of admitted tokens"), std::string::npos) << text;
}

TEST(PlanTest, NoPrefixCachingActionWhenOnOrWhenPromptsDoNotRepeat) {
  const auto rare = Plan(RepeatedPromptsCachingOff(0.05), RepeatedPromptsContext(false));
  for (const Action& a : rare.plan.actions) EXPECT_NE(a.kind, ActionKind::kEnablePrefixCaching);
  auto steps = RepeatedPromptsCachingOff(0.875);
  for (StepRecord& s : steps) s.options.prefix_caching = true;  // on: those were hits
  const auto on = Plan(steps, RepeatedPromptsContext(true));
  EXPECT_NEAR(on.profile.prefix_hit_rate, 0.875, 1e-9);
  for (const Action& a : on.plan.actions) EXPECT_NE(a.kind, ActionKind::kEnablePrefixCaching);
}

// Four clients with 1500-token prompts and 2 output tokens: each step carries a prompt chunk
// the token budget allows, the others wait, so the queue binds; but every output token costs
// a prompt, and more sequences per step add nothing the request mix would turn into tokens/s.
// No action may be offered whose prediction (with the mix) gains less than min_gain: a
// "raise max_num_seqs 64 -> 81: 1.36 -> 1.36 tok/s" was the plan on this load on the CPU, and
// here (max_num_seqs 2) it was "2 -> 16: 0.716 -> 0.679 tok/s" before the mix's gain was
// checked; the note then says why there is no action.
TEST(PlanTest, NoActionWhoseMixPredictionGainsNothing) {
  const auto m = testing_diag::Small();
  StepSpec s;
  s.seqs = 2;
  s.prefill_tokens = 1500;
  s.context = 1500;
  s.queue_depth = 2;
  s.running = 2;
  s.max_num_seqs = 2;
  const std::vector<StepRecord> steps = testing_diag::Steps(m, TrueModel{}, s, 12);
  AnalyzerContext ctx = testing_diag::TestContext(m, 2);
  ctx.mean_prompt_tokens = 1500;
  ctx.mean_output_tokens = 2;
  ctx.num_running = 2;
  ctx.num_waiting = 2;
  const auto r = Plan(steps, ctx);
  for (const Action& a : r.plan.actions) {
    EXPECT_GE(a.tokens_per_s_after, AnalyzerThresholds().min_gain * a.tokens_per_s_before)
        << a.what << " / " << r.plan.note;
  }
  if (r.plan.actions.empty()) EXPECT_FALSE(r.plan.note.empty());
}

// The step model (fit on the window's batch-4 steps) puts the plateau far above the rate now,
// but probed steps where every row costs as much as a whole step (a contended or instrumented
// machine) show no gain: no action, and the note names the change it weighed and why it fell.
TEST(PlanTest, MeasuredStepsThatGainNothingDeclineTheModelsPlateau) {
  const std::vector<StepRecord> steps = MemoryBoundAt4(40);
  auto ctx = testing_diag::TestContext(testing_diag::Small(), 4);
  const double t4 = steps[0].wall_us();
  for (double b : {1, 2, 4, 8, 16, 32, 64}) {
    ctx.probe_curve.decode.push_back(CurvePoint{b, t4 * b / 4, 0.01, 3});
  }
  // On the CPU the f32 weights at batch 4 still get the quantize action (the window's GEMMs
  // stream them), and no batching action.
  const auto cpu = Plan(steps, ctx);
  ASSERT_EQ(cpu.plan.actions.size(), 1u);
  EXPECT_EQ(cpu.plan.actions[0].kind, ActionKind::kQuantizeWeights);
  EXPECT_EQ(cpu.plan.actions[0].batch_after, 4);
  // The batching rule alone: a backend without quantized kernels.
  ctx.backend = "cuda";
  const auto r = Plan(steps, ctx);
  ASSERT_TRUE(r.plan.actions.empty()) << r.plan.actions[0].what;
  EXPECT_GT(r.plan.plateau_tokens_per_s, 2 * 4 / t4 * 1e6);  // the model's plateau
  EXPECT_NE(r.plan.note.find("raise max_num_seqs 4 -> "), std::string::npos) << r.plan.note;
  EXPECT_NE(r.plan.note.find("was weighed and declined: the measured steps give"),
            std::string::npos)
      << r.plan.note;
  // The same window with steps that do gain keeps the action and says nothing of it.
  ctx.probe_curve.decode.clear();
  for (double b : {1, 2, 4, 8, 16, 32, 64}) {
    ctx.probe_curve.decode.push_back(CurvePoint{b, t4 * (1 + 0.1 * (b - 4)), 0.01, 3});
  }
  const auto gain = Plan(steps, ctx);
  ASSERT_FALSE(gain.plan.actions.empty());
  EXPECT_EQ(gain.plan.actions[0].kind, ActionKind::kRaiseMaxNumSeqs);
  EXPECT_TRUE(gain.plan.note.empty()) << gain.plan.note;
}

TEST(PlanTest, PrefillBudgetLimitedRaisesMaxNumBatchedTokens) {
  StepSpec s;
  s.prefill_tokens = 16;
  s.max_num_batched_tokens = 16;
  s.queue_depth = 5;
  s.max_num_seqs = 64;
  s.seqs = 1;
  auto ctx = testing_diag::TestContext(testing_diag::Small(), 64);
  ctx.options.max_num_batched_tokens = 16;
  const auto r = Plan(testing_diag::Steps(testing_diag::Small(), TrueModel{}, s, 6), ctx);
  const Action* a = nullptr;
  for (const Action& x : r.plan.actions) {
    if (x.kind == ActionKind::kRaiseMaxNumBatchedTokens) a = &x;
  }
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->from, 16);
  EXPECT_GT(a->to, 16);
  EXPECT_LE(a->to, 256);
  EXPECT_GT(a->tokens_per_s_after, 1.3 * a->tokens_per_s_before);
  EXPECT_GT(a->tpot_ms_after, a->tpot_ms_before);  // decodes sharing the step wait longer
  EXPECT_EQ(a->options_after.max_num_batched_tokens, a->to);
}

// Launch-bound windows: graphs only on a backend that can capture them, and only when off.
std::vector<StepRecord> LaunchBound() {
  TrueModel t;
  t.host_us = 40;
  t.op_overhead_us = 0;  // CUDA-style: launches show up as gaps, not inside ops
  ModelConfig m = testing_diag::Micro();
  StepSpec s;
  s.max_num_seqs = 1;
  auto steps = testing_diag::Steps(m, t, s, 20);
  for (StepRecord& r : steps) {  // add the launch gaps: 6 us per op
    r.end_us += 6.0 * r.op_count;
  }
  for (size_t i = 1; i < steps.size(); ++i) {
    const double w = steps[i].wall_us();
    steps[i].start_us = steps[i - 1].end_us;
    steps[i].end_us = steps[i].start_us + w;
  }
  return steps;
}

AnalyzerContext CudaContext(bool supports, bool on) {
  auto ctx = testing_diag::TestContext(testing_diag::Micro(), 1);
  ctx.backend = "cuda";
  ctx.supports_graphs = supports;
  ctx.options.cuda_graphs = on;
  ctx.graph_sizes = {1, 2, 4, 8};
  return ctx;
}

Calibration CudaCal() {
  Calibration c = testing_diag::TestCalibration();
  c.backend = "cuda";
  c.op_dispatch_us = 6;
  return c;
}

TEST(PlanTest, LaunchBoundOnGraphBackendEnablesGraphsFirst) {
  const auto steps = LaunchBound();
  const auto r = Analyze(steps, 0, steps.back().end_us, CudaCal(), CudaContext(true, false));
  EXPECT_EQ(r.verdict.bottleneck, Bottleneck::kLaunchBound) << r.verdict.summary;
  ASSERT_FALSE(r.plan.actions.empty());
  const Action& a = r.plan.actions[0];
  EXPECT_EQ(a.kind, ActionKind::kEnableCudaGraphs);
  EXPECT_TRUE(a.options_after.cuda_graphs);
  EXPECT_GT(a.tokens_per_s_after, 1.5 * a.tokens_per_s_before);
  EXPECT_LT(a.tpot_ms_after, a.tpot_ms_before);
  const FailureMode* mem = FindMode(a, "graph_memory");
  ASSERT_NE(mem, nullptr);
  EXPECT_DOUBLE_EQ(mem->at, 4 * 10.0 * (1 << 20));  // estimated: 10 MiB per size
  EXPECT_NE(FindMode(a, "padding_waste"), nullptr);
}

// The probe timed the decode batches with graphs off (the setting in force) and on: the
// graphs action is read off those measured steps (the probe's on/off ratio at the batch, on
// the window's own step), inside the measured range, where without them the fitted model's
// launch term decides (the first H200 run: that predicted 1.08-1.30x where graphs gave
// 1.29-1.82x).
TEST(PlanTest, GraphsActionReadOffTheProbesBothSettings) {
  const auto steps = LaunchBound();
  AnalyzerContext ctx = CudaContext(true, false);
  const auto model_only = Analyze(steps, 0, steps.back().end_us, CudaCal(), ctx);
  ASSERT_FALSE(model_only.plan.actions.empty());
  ASSERT_EQ(model_only.plan.actions[0].kind, ActionKind::kEnableCudaGraphs);
  const double t1 = steps[0].wall_us();
  for (double b : {1, 2, 4, 8}) {
    ctx.probe_curve.decode.push_back(CurvePoint{b, t1 * (1 + 0.1 * (b - 1)), 0.01, 3});
    // Replayed: a third of the eager step at batch 1, growing the same 10 % a row.
    ctx.probe_curve_other_graphs.decode.push_back(
        CurvePoint{b, t1 / 3 * (1 + 0.1 * (b - 1)), 0.01, 3});
  }
  ctx.probe_graphs = false;
  ctx.probe_context = 100;
  const auto r = Analyze(steps, 0, steps.back().end_us, CudaCal(), ctx);
  ASSERT_FALSE(r.plan.actions.empty());
  const Action& a = r.plan.actions[0];
  ASSERT_EQ(a.kind, ActionKind::kEnableCudaGraphs);
  EXPECT_FALSE(a.outside_measured);
  EXPECT_NEAR(a.tokens_per_s_after / a.tokens_per_s_before, 3.0, 0.03);
  EXPECT_NE(model_only.plan.actions[0].tokens_per_s_after /
                model_only.plan.actions[0].tokens_per_s_before,
            a.tokens_per_s_after / a.tokens_per_s_before);
  // Measured with graphs on while they are off again: not this window's setting, not used.
  ctx.probe_graphs = true;
  const auto other = Analyze(steps, 0, steps.back().end_us, CudaCal(), ctx);
  ASSERT_FALSE(other.plan.actions.empty());
  EXPECT_NE(other.plan.actions[0].tokens_per_s_after / other.plan.actions[0].tokens_per_s_before,
            a.tokens_per_s_after / a.tokens_per_s_before);
}

TEST(PlanTest, NoGraphsActionWithoutSupportOrWhenAlreadyOn) {
  const auto steps = LaunchBound();
  for (bool supports : {false, true}) {
    const auto r =
        Analyze(steps, 0, steps.back().end_us, CudaCal(), CudaContext(supports, supports));
    EXPECT_EQ(r.verdict.bottleneck, Bottleneck::kLaunchBound);
    for (const Action& a : r.plan.actions) EXPECT_NE(a.kind, ActionKind::kEnableCudaGraphs);
  }
}

// The plan's curve holds prefill chunks as pure prefill at the mix's steady-state context:
// the window's mixed steps (8 decodes beside a 64-token chunk) are moved there by the cost
// model, so their points read faster than the steps did, and say no decode rows are left in them.
TEST(PlanTest, MixedStepsAreMovedToPurePrefillAtTheMixContext) {
  StepSpec dec;
  dec.seqs = 8;
  dec.context = 100;
  dec.queue_depth = 20;
  dec.max_num_seqs = 9;
  StepSpec mixed = dec;
  mixed.seqs = 9;  // 8 decodes and one 64-token chunk
  mixed.prefill_tokens = 64;
  std::vector<StepRecord> steps;
  double at = 0;
  for (int i = 0; i < 24; ++i) {
    steps.push_back(testing_diag::MakeStep(testing_diag::Small(), TrueModel{},
                                           i % 3 == 0 ? mixed : dec, at, i));
    at = steps.back().end_us;
  }
  auto ctx = testing_diag::TestContext(testing_diag::Small(), 9);
  ctx.mean_prompt_tokens = 64;
  const auto r = Plan(steps, ctx);
  // O = 1 + P x decode tokens / prefill tokens = 1 + 64 x (24 x 8) / (8 x 64) = 25.
  EXPECT_NEAR(r.plan.context, 64 + 25 / 2.0, 1e-6);
  const double mixed_us = steps[0].wall_us();
  bool found = false;
  for (const CurvePoint& p : r.plan.curve.prefill) {
    if (std::abs(p.x - 72) > 0.5) continue;
    found = true;
    EXPECT_EQ(p.decode_rows, 0);
    // 8 decode rows over a context of 100 cost more than 8 prompt rows (here ~5 %).
    EXPECT_LT(p.us, 0.98 * mixed_us);
    EXPECT_GT(p.us, 0.5 * mixed_us);
  }
  EXPECT_TRUE(found);
}

// One stream decoding on the CPU at batch 1 (the limit: no batching action), weights of
// `weight_bytes` per weight (4 f32, 2 bf16, 34/32 q8_0).
std::vector<StepRecord> OneStream(double weight_bytes) {
  StepSpec s;
  s.seqs = 1;
  s.max_num_seqs = 1;
  s.weight_dtype_bytes = weight_bytes;
  return testing_diag::Steps(testing_diag::Small(), TrueModel{}, s, 10);
}

AnalyzerContext OneStreamContext(double weight_bytes) {
  auto ctx = testing_diag::TestContext(testing_diag::Small(), 1);
  ctx.max_num_seqs_limit = 1;
  ctx.weight_dtype_bytes = weight_bytes;
  ctx.weight_bytes = 2e8;
  return ctx;
}

const Action* FindAction(const DiagnosticsReport& r, ActionKind kind) {
  for (const Action& a : r.plan.actions) {
    if (a.kind == kind) return &a;
  }
  return nullptr;
}

// The true model's batch-1 decode step with the GEMMs reading `saved` fewer weight bytes.
double TrueStepWithFewerBytes(const StepRecord& step, double saved) {
  const TrueModel t;
  const OpClassStats& g = step.by_class[static_cast<size_t>(OpClass::kGemm)];
  auto gemm_us = [&](double bytes) {
    return g.count * t.op_overhead_us + std::max(bytes / t.bytes_per_us, g.flops / t.flops_per_us);
  };
  return step.wall_us() - gemm_us(g.bytes) + gemm_us(g.bytes - saved);
}

TEST(PlanTest, MemoryBoundCpuDecodeIsToldToQuantizeWeights) {
  const ModelConfig m = testing_diag::Small();  // every GEMM's columns whole q8_0 blocks
  const double q8 = 34.0 / 32;
  for (double bytes : {4.0, 2.0}) {
    SCOPED_TRACE(bytes);
    const std::vector<StepRecord> steps = OneStream(bytes);
    const auto r = Plan(steps, OneStreamContext(bytes));
    EXPECT_EQ(r.verdict.step_bound, Bottleneck::kMemoryBound);
    ASSERT_EQ(r.plan.actions.size(), 1u) << r.plan.note;
    const Action& a = r.plan.actions[0];
    EXPECT_EQ(a.kind, ActionKind::kQuantizeWeights);
    EXPECT_EQ(a.restart_flags, "--quantization q8_0");
    EXPECT_NE(a.what.find("--quantization q8_0"), std::string::npos) << a.what;
    EXPECT_EQ(a.from, bytes);
    EXPECT_EQ(a.to, q8);
    EXPECT_EQ(a.options_after, OneStreamContext(bytes).options);  // no live option changes
    // The formula: the measured step less the GEMM time of the weight bytes no longer read;
    // here the true model's own step with q8_0 weights, which the fit recovers.
    const double saved = WeightBytesPerStep(m, bytes) - WeightBytesPerStep(m, q8);
    EXPECT_NEAR(a.tokens_per_s_before, 1e6 / steps[0].wall_us(), 1e-3 * a.tokens_per_s_before);
    const double expected = 1e6 / TrueStepWithFewerBytes(steps[0], saved);
    EXPECT_NEAR(a.tokens_per_s_after, expected, 0.01 * expected);
    EXPECT_GT(a.tokens_per_s_after, 1.5 * a.tokens_per_s_before);  // mostly weight reads
    EXPECT_LT(a.tpot_ms_after, a.tpot_ms_before);
    EXPECT_TRUE(a.outside_measured);  // no step with these weights was measured
    // q4_0's figure beside it: fewer bytes (the LM head at q8_0), more tokens/s.
    const FailureMode* w = FindMode(a, "weight_bytes");
    ASSERT_NE(w, nullptr);
    EXPECT_NEAR(w->at, WeightBytesPerStep(m, q8), 1);
    EXPECT_NE(w->detail.find("q4_0"), std::string::npos);
    const FailureMode* restart = FindMode(a, "restart");
    ASSERT_NE(restart, nullptr);
    EXPECT_NE(restart->detail.find("restarting the server with --quantization q8_0"),
              std::string::npos);
    const FailureMode* accuracy = FindMode(a, "accuracy");
    ASSERT_NE(accuracy, nullptr);
    EXPECT_NE(accuracy->detail.find("not measured"), std::string::npos);
    EXPECT_NE(accuracy->detail.find("saturn-bench-kl"), std::string::npos);
    EXPECT_NE(FindMode(a, "latency"), nullptr);
    const v1::DiagnosticsReport proto = ToProto(r);
    EXPECT_EQ(proto.plan(0).kind(), "quantize_weights");
    EXPECT_EQ(proto.plan(0).restart_flags(), "--quantization q8_0");
    EXPECT_NE(RenderReport(proto).find("quantize weights to q8_0"), std::string::npos);
  }
}

TEST(PlanTest, NoQuantizeActionForQuantizedWeightsCudaOrComputeBoundSteps) {
  const double q8 = 34.0 / 32;
  // Already q8_0: still memory-bound, nothing left to propose.
  const auto quantized = Plan(OneStream(q8), OneStreamContext(q8));
  EXPECT_EQ(quantized.verdict.step_bound, Bottleneck::kMemoryBound);
  EXPECT_EQ(FindAction(quantized, ActionKind::kQuantizeWeights), nullptr);
  // The CUDA backend refuses q8_0 and q4_0.
  AnalyzerContext cuda = OneStreamContext(4);
  cuda.backend = "cuda";
  const auto on_cuda = Plan(OneStream(4), cuda);
  EXPECT_EQ(on_cuda.verdict.step_bound, Bottleneck::kMemoryBound);
  EXPECT_EQ(FindAction(on_cuda, ActionKind::kQuantizeWeights), nullptr);
  // Compute-bound decode at batch 64 (the true model's ridge is near batch 20).
  StepSpec s;
  s.seqs = 64;
  s.max_num_seqs = 64;
  auto big = testing_diag::TestContext(testing_diag::Small(), 64);
  big.max_num_seqs_limit = 64;
  const auto compute = Plan(testing_diag::Steps(testing_diag::Small(), TrueModel{}, s, 10), big);
  EXPECT_EQ(compute.verdict.step_bound, Bottleneck::kComputeBound);
  EXPECT_EQ(FindAction(compute, ActionKind::kQuantizeWeights), nullptr);
  // Memory-bound at batch 4, where raising max_num_seqs comes first: quantizing is predicted
  // at the batch that action reaches (under the ridge there), from its step.
  auto ctx4 = testing_diag::TestContext(testing_diag::Small(), 4);
  const auto raised = Plan(MemoryBoundAt4(40), ctx4);
  ASSERT_EQ(raised.plan.actions.size(), 2u);
  const Action& raise = raised.plan.actions[0];
  EXPECT_EQ(raise.kind, ActionKind::kRaiseMaxNumSeqs);
  const Action* after = FindAction(raised, ActionKind::kQuantizeWeights);
  ASSERT_NE(after, nullptr);
  EXPECT_EQ(after->batch_after, raise.batch_after);
  EXPECT_NEAR(after->tokens_per_s_before, raise.tokens_per_s_after,
              1e-9 * raise.tokens_per_s_after);
  EXPECT_GT(after->tokens_per_s_after, after->tokens_per_s_before);
}

// The quantized kernel's calibrated compute peak bounds the step after: with a peak as high as
// the current one the prediction is as without one; with one so low that the batch the plan
// reaches turns compute-bound under q8_0 (as bf16 on AMX against the VNNI kernel), quantizing
// gains nothing and is not proposed.
TEST(PlanTest, QuantizedKernelsPeakBoundsTheQuantizePrediction) {
  const auto steps = MemoryBoundAt4(40);
  const AnalyzerContext ctx = testing_diag::TestContext(testing_diag::Small(), 4);
  auto with_peak = [&](double q8_peak) {
    Calibration cal = testing_diag::TestCalibration();
    cal.q8_0_gemm_flops_per_s = q8_peak;
    return Analyze(steps, steps.front().start_us, steps.back().end_us, cal, ctx);
  };
  const DiagnosticsReport none = with_peak(0);
  const Action* base = FindAction(none, ActionKind::kQuantizeWeights);
  ASSERT_NE(base, nullptr);
  const DiagnosticsReport same = with_peak(testing_diag::TestCalibration().gemm_flops_per_s);
  const Action* a = FindAction(same, ActionKind::kQuantizeWeights);
  ASSERT_NE(a, nullptr);
  EXPECT_LE(a->tokens_per_s_after, base->tokens_per_s_after * (1 + 1e-9));
  EXPECT_GT(a->tokens_per_s_after, a->tokens_per_s_before);
  const FailureMode* rate = FindMode(*a, "kernel_rate");
  ASSERT_NE(rate, nullptr);
  EXPECT_NE(rate->detail.find("calibrated 100 GFLOP/s"), std::string::npos) << rate->detail;
  const DiagnosticsReport slow = with_peak(1e8);  // a thousandth of the GEMM peak
  EXPECT_EQ(FindAction(slow, ActionKind::kQuantizeWeights), nullptr);
}

// Where the q8_0 streams were calibrated (1 and 8 rows), the GEMMs after are timed on the
// line through them: streams at the calibrated bandwidth keep the action; an 8-row stream so
// slow that a few rows cost more than the bytes saved drops it.
TEST(PlanTest, CalibratedQ8StreamsTimeTheQuantizedGemms) {
  const auto steps = MemoryBoundAt4(40);
  const AnalyzerContext ctx = testing_diag::TestContext(testing_diag::Small(), 4);
  auto with_streams = [&](double r1, double r8) {
    Calibration cal = testing_diag::TestCalibration();
    cal.q8_0_stream_bytes_per_s = r1;
    cal.q8_0_stream8_bytes_per_s = r8;
    return Analyze(steps, steps.front().start_us, steps.back().end_us, cal, ctx);
  };
  const double bw = testing_diag::TestCalibration().bandwidth_bytes_per_s;
  const DiagnosticsReport fast = with_streams(bw, bw);
  const Action* a = FindAction(fast, ActionKind::kQuantizeWeights);
  ASSERT_NE(a, nullptr);
  EXPECT_GT(a->tokens_per_s_after, 1.05 * a->tokens_per_s_before);
  const FailureMode* rate = FindMode(*a, "kernel_rate");
  ASSERT_NE(rate, nullptr);
  EXPECT_NE(rate->detail.find("calibrated q8_0 weight streams"), std::string::npos) << rate->detail;
  EXPECT_EQ(FindAction(with_streams(bw, bw / 1000), ActionKind::kQuantizeWeights), nullptr);
}

// Decode steps whose batches are `batches` in turn, each sequence's next 4 tokens proposed by
// n-gram lookup (not used: speculation off) and 95 % of them matching; `gap_us` idle between.
std::vector<StepRecord> ScoredDecodes(const std::vector<int>& batches, double gap_us) {
  std::vector<StepRecord> steps;
  double at = 0;
  for (int seqs : batches) {
    StepSpec s;
    s.seqs = seqs;
    s.max_num_seqs = 64;
    StepRecord r = testing_diag::MakeStep(testing_diag::Small(), TrueModel{}, s, at);
    r.shadow_proposals = seqs;
    r.shadow_drafted = 4 * seqs;
    r.shadow_accepted = static_cast<int>(std::lround(3.8 * seqs));
    at = r.end_us + gap_us;
    steps.push_back(r);
  }
  return steps;
}

// Speculation shortens the time a request decodes. Clients that wait for their answers (a
// closed loop: the batch holds) keep the batch; requests that arrive on their own (an open
// loop: the batch varies as a Poisson count given one runs) overlap less, and the plan
// predicts at the smaller batch that leaves, saying so.
TEST(PlanTest, SpeculationInAnOpenLoopPlansTheBatchItLeaves) {
  AnalyzerContext ctx = testing_diag::TestContext(testing_diag::Small(), 64);
  ctx.speculative_tokens_scored = 4;
  std::vector<int> open;  // a zero-truncated Poisson count of mean 1 (mean 1.575)
  for (int i = 0; i < 4; ++i) {
    for (int n : {1, 1, 2, 1, 3, 1, 2, 1, 1, 2}) open.push_back(n);
  }
  open.back() = 4;
  const auto r_open = Plan(ScoredDecodes(open, 20000), ctx);
  const Action* a = FindAction(r_open, ActionKind::kSetSpeculativeTokens);
  ASSERT_NE(a, nullptr) << RenderReport(ToProto(r_open));
  EXPECT_LT(a->batch_after, 1.5);
  EXPECT_GT(a->batch_after, 1.0);
  const FailureMode* rows = FindMode(*a, "speculation_rows");
  ASSERT_NE(rows, nullptr);
  EXPECT_NE(rows->detail.find("open-loop"), std::string::npos) << rows->detail;

  const auto r_closed = Plan(ScoredDecodes(std::vector<int>(40, 2), 0), ctx);
  const Action* c = FindAction(r_closed, ActionKind::kSetSpeculativeTokens);
  ASSERT_NE(c, nullptr) << RenderReport(ToProto(r_closed));
  EXPECT_DOUBLE_EQ(c->batch_after, 2.0);
  EXPECT_EQ(FindMode(*c, "speculation_rows")->detail.find("open-loop"), std::string::npos);
  // Tokens per step: between 1 / (q / (1 + m) + 1 - q) and 1 + q m (all positions propose,
  // q = 1: both 1 + m = 4.8), over the decode step of 2 sequences at most 4.8x its rows.
  EXPECT_GT(c->tokens_per_s_after, c->tokens_per_s_before);
  // Few proposals leave the kept share uncertain: the expected error is wider with 40 steps'
  // worth than with 400.
  const auto r_long = Plan(ScoredDecodes(std::vector<int>(400, 2), 0), ctx);
  const Action* l = FindAction(r_long, ActionKind::kSetSpeculativeTokens);
  ASSERT_NE(l, nullptr);
  EXPECT_GT(c->expected_error, l->expected_error);
}

// A verify step emits about 1 + m tokens a sequence, and the host's work after a step grows with
// its tokens. Where the window's decode steps all emitted as many tokens, their host work per
// token only bounds that growth: half of it is added to the verify step and half joins the
// error. Where their tokens varied, the fitted time per token is added whole, no error.
TEST(PlanTest, SpeculationAddsTheHostWorkOfTheTokensAVerifyStepEmits) {
  AnalyzerContext ctx = testing_diag::TestContext(testing_diag::Small(), 64);
  ctx.speculative_tokens_scored = 4;
  auto spec = [&](std::vector<StepRecord> steps, double per_step, double per_token) {
    for (StepRecord& r : steps) r.postprocess_us = per_step + per_token * r.num_decode_tokens;
    const DiagnosticsReport r = Plan(steps, ctx);
    const Action* a = FindAction(r, ActionKind::kSetSpeculativeTokens);
    EXPECT_NE(a, nullptr);
    return a == nullptr ? Action{} : *a;
  };
  const std::vector<StepRecord> two = ScoredDecodes(std::vector<int>(400, 2), 0);
  const Action none = spec(two, 0, 0), bound = spec(two, 0, 500);
  // q = 1, m about 3.8 (kept tokens are whole per step): 2 x 3.8 x 500 / 2 = 1,900 us more
  // per verify step.
  const double step_none = 2 * (1 + 3.8) / none.tokens_per_s_after * 1e6;
  const double step_bound = 2 * (1 + 3.8) / bound.tokens_per_s_after * 1e6;
  EXPECT_NEAR(step_bound - step_none, 1900, 0.02 * 1900);
  EXPECT_NEAR(bound.expected_error - none.expected_error, 1900 / step_bound, 0.02);
  std::vector<int> batches;
  for (int i = 0; i < 200; ++i) batches.push_back(i % 2 ? 4 : 2);
  const std::vector<StepRecord> varied = ScoredDecodes(batches, 0);
  const Action v0 = spec(varied, 0, 0), fitted = spec(varied, 300, 200);
  EXPECT_LT(fitted.tokens_per_s_after, v0.tokens_per_s_after);
  EXPECT_LE(fitted.expected_error, v0.expected_error);  // nothing added: the fit knows it
}

}  // namespace
}  // namespace saturn
