// The measured step-time curve and the workload-aware throughput model: interpolation,
// out-of-range flagging and widening error, grouping a window's steps, and the request mix
// (prompt length, queueing beyond max_num_seqs) changing the predicted gain. No timing.
#include "engine/diag/step_curve.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <tuple>

#include "engine/diag/analyzer.h"
#include "tests/engine/diag/synthetic.h"

namespace saturn {
namespace {

std::vector<CurvePoint> Line() {  // 1000 us + 100 us per row, measured at 1, 4, 16 rows
  return {{.x = 1, .us = 1100, .spread = 0.2, .samples = 5, .error = 0.01},
          {.x = 4, .us = 1400, .spread = 0.5, .samples = 5, .error = 0.03},
          {.x = 16, .us = 2600, .spread = 0.4, .samples = 5, .error = 0.02}};
}

TEST(StepCurveTest, InterpolatesInsideTheMeasuredRange) {
  const CurveLookup l = Interpolate(Line(), 10);
  EXPECT_TRUE(l.in_range);
  EXPECT_NEAR(l.us, 2000, 1e-6);
  // The larger neighbour's error (its mean's, not its single steps' spread) + interpolation.
  EXPECT_NEAR(l.rel_error, 0.03 + 0.02, 1e-9);
  EXPECT_NEAR(Interpolate(Line(), 4).us, 1400, 1e-6);
}

TEST(StepCurveTest, FlagsQueriesOutsideTheRangeWithAWiderError) {
  const CurveLookup in = Interpolate(Line(), 16);
  const CurveLookup out2 = Interpolate(Line(), 32);
  const CurveLookup out4 = Interpolate(Line(), 64);
  EXPECT_TRUE(in.in_range);
  EXPECT_FALSE(out2.in_range);
  EXPECT_FALSE(out4.in_range);
  EXPECT_NEAR(out2.us, 4200, 1e-6);  // the last segment's slope carried on
  EXPECT_GT(out2.rel_error, in.rel_error + 0.2);
  EXPECT_GT(out4.rel_error, out2.rel_error + 0.2);
  // Below the range a falling segment is never extended downwards.
  const std::vector<CurvePoint> falling = {{4, 1000, 0, 3}, {8, 900, 0, 3}};
  EXPECT_GE(Interpolate(falling, 32).us, 900 - 1e-6);
  EXPECT_FALSE(Interpolate({}, 4).in_range);
}

TEST(StepCurveTest, GroupsWindowStepsByShapeWithTheirMean) {
  std::vector<StepRecord> steps;
  const double walls[] = {1000, 1100, 5000};  // one stall: it costs throughput, so it counts
  for (int seqs : {2, 8}) {
    for (double w : walls) {
      StepRecord r;
      r.num_seqs = seqs;
      r.num_decode_tokens = seqs;
      r.start_us = 0;
      r.end_us = w * seqs;
      steps.push_back(r);
    }
  }
  StepRecord lone;  // a shape seen once is left out
  lone.num_seqs = lone.num_decode_tokens = 5;
  lone.end_us = 1;
  steps.push_back(lone);
  StepRecord pre;
  pre.num_prefill_tokens = 100;
  pre.num_seqs = 1;
  pre.end_us = 9000;
  steps.push_back(pre);
  steps.push_back(pre);
  const StepCurve c = CurveFromSteps(steps);
  ASSERT_EQ(c.decode.size(), 2u);
  EXPECT_EQ(c.decode[0].x, 2);
  EXPECT_NEAR(c.decode[0].us, 2 * 7100 / 3.0, 1e-6);
  EXPECT_EQ(c.decode[1].x, 8);
  EXPECT_NEAR(c.decode[1].us, 8 * 7100 / 3.0, 1e-6);
  EXPECT_GT(c.decode[0].spread, 1.0);
  ASSERT_EQ(c.prefill.size(), 1u);
  EXPECT_EQ(c.prefill[0].x, 100);
}

// A step model of the shape decode and prefill have: a fixed weight stream + per row cost.
CurveLookup Linear(double rows, double, bool, double) {
  return CurveLookup{2000 + 50 * rows, true, 0.02};
}

TEST(StepCurveTest, DecodeOnlyMixIsBatchOverStepTime) {
  const MixPrediction m = PredictMix(Linear, WorkloadMix{0, 1e9}, 8, 64, 2048);
  EXPECT_NEAR(m.decode_batch, 8, 1e-6);
  EXPECT_NEAR(m.output_tokens_per_s, 8 / 2400e-6, 1e-3);
  EXPECT_EQ(m.prefill_share, 0);
  EXPECT_NEAR(m.rel_error, 0.02, 1e-9);
}

TEST(StepCurveTest, LongerPromptsLowerThePredictedGain) {
  const WorkloadMix shorts{32, 64}, longs{1024, 64};
  const MixPrediction s1 = PredictMix(Linear, shorts, 1, 64, 512);
  const MixPrediction s32 = PredictMix(Linear, shorts, 32, 64, 512);
  const MixPrediction l1 = PredictMix(Linear, longs, 1, 64, 512);
  const MixPrediction l32 = PredictMix(Linear, longs, 32, 64, 512);
  EXPECT_GT(l32.prefill_share, s32.prefill_share);
  EXPECT_LT(l32.output_tokens_per_s, s32.output_tokens_per_s);
  EXPECT_LT(l32.output_tokens_per_s / l1.output_tokens_per_s,
            s32.output_tokens_per_s / s1.output_tokens_per_s);
  // Requests in prefill hold slots: the decode batch is below the concurrency.
  EXPECT_LT(l32.decode_batch, 32);
  EXPECT_GT(s32.rel_error, 0.02);  // mixed steps add the mix model's error
}

// 26 clients that started together, 32 prompt + 16 output tokens each: every cycle is one
// pure prefill step of 26 x 32 = 832 rows, then 15 decode steps at batch 26. The Poisson
// stream puts prefill in most steps instead; the blend sits between, its error widened by
// half the two models' distance.
TEST(StepCurveTest, CohortsPrefillTogetherThenDecodeAtTheFullBatch) {
  const WorkloadMix mix{32, 16};
  const MixPrediction c = PredictCohorts(Linear, mix, 26, 64, 2048);
  const double cycle = (2000 + 50 * 832) + 15 * (2000 + 50 * 26);
  EXPECT_NEAR(c.output_tokens_per_s, 26 * 16 / cycle * 1e6, 1e-6);
  EXPECT_NEAR(c.prefill_step_fraction, 1.0 / 16, 1e-12);
  EXPECT_NEAR(c.prefill_share, (2000 + 50 * 832) / cycle, 1e-12);
  EXPECT_EQ(c.decode_batch, 26);
  // Prompts past the budget take more steps: 26 x 100 = 2600 rows in 2 steps of 2048.
  const MixPrediction longer = PredictCohorts(Linear, WorkloadMix{100, 16}, 26, 64, 2048);
  EXPECT_NEAR(longer.prefill_step_fraction, 2.0 / 17, 1e-12);
  // More clients than max_num_seqs: cohorts of 8 one after another, no faster than one.
  EXPECT_NEAR(PredictCohorts(Linear, mix, 40, 8, 2048).output_tokens_per_s,
              PredictCohorts(Linear, mix, 8, 8, 2048).output_tokens_per_s, 1e-9);

  // Linear step times make the two models agree (every row and step costs the same wherever it
  // runs); decodes slowed by the prefill rows beside them (a CPU's mixed steps) do not.
  const MixPrediction p = PredictMix(Linear, mix, 26, 64, 2048);
  EXPECT_GT(p.prefill_step_fraction, 0.5);
  EXPECT_NEAR(p.output_tokens_per_s, c.output_tokens_per_s, 1e-6 * c.output_tokens_per_s);
  auto mixed_slow = [](double rows, double decodes, bool prefill, double) {
    return CurveLookup{2000 + 50 * rows + (prefill ? 100 * decodes : 0), true, 0.02};
  };
  const MixPrediction ps = PredictMix(mixed_slow, mix, 26, 64, 2048);
  const MixPrediction cs = PredictCohorts(mixed_slow, mix, 26, 64, 2048);
  EXPECT_GT(cs.output_tokens_per_s, 1.1 * ps.output_tokens_per_s);
  const MixPrediction half = PredictMix(mixed_slow, mix, 26, 64, 2048, 0.5);
  EXPECT_NEAR(half.output_tokens_per_s, (ps.output_tokens_per_s + cs.output_tokens_per_s) / 2,
              1e-6);
  const double apart = (cs.output_tokens_per_s - ps.output_tokens_per_s) /
                       (ps.output_tokens_per_s + cs.output_tokens_per_s);
  EXPECT_NEAR(half.rel_error, (ps.rel_error + cs.rel_error) / 2 + apart, 1e-12);
  EXPECT_NEAR(PredictMix(mixed_slow, mix, 26, 64, 2048, 1).output_tokens_per_s,
              cs.output_tokens_per_s, 1e-6);
}

TEST(StepCurveTest, ConcurrencyBeyondMaxNumSeqsQueues) {
  const WorkloadMix mix{64, 64};
  const MixPrediction at8 = PredictMix(Linear, mix, 8, 8, 2048);
  const MixPrediction at40 = PredictMix(Linear, mix, 40, 8, 2048);
  EXPECT_NEAR(at40.output_tokens_per_s, at8.output_tokens_per_s, 1e-9);
  EXPECT_GT(PredictMix(Linear, mix, 40, 40, 2048).output_tokens_per_s,
            1.5 * at8.output_tokens_per_s);
}

TEST(StepCurveTest, OutOfRangeLookupsFlagThePrediction) {
  auto lookup = [](double rows, double decodes, bool prefill, double) {
    return prefill ? CurveLookup{3000 + 10 * rows, false, 0.4} : Linear(rows, decodes, false, 0);
  };
  const MixPrediction m = PredictMix(lookup, WorkloadMix{256, 64}, 16, 64, 2048);
  EXPECT_FALSE(m.in_range);
  EXPECT_GT(m.rel_error, PredictMix(Linear, WorkloadMix{256, 64}, 16, 64, 2048).rel_error);
}

// A mixed step's time depends on how many of its rows are decodes (each attends over its
// context and takes a logits row): the lookup is told, and a costlier decode row lowers the
// prediction of a mix with many decodes beside each chunk.
TEST(StepCurveTest, MixedStepsAreLookedUpWithTheirDecodeRows) {
  std::vector<std::pair<double, double>> asked;
  auto lookup = [&](double rows, double decodes, bool prefill, double) {
    if (prefill) asked.emplace_back(rows, decodes);
    return CurveLookup{2000 + 50 * rows + 100 * (prefill ? decodes : 0), true, 0.02};
  };
  const WorkloadMix mix{96, 96};
  const MixPrediction m = PredictMix(lookup, mix, 24, 64, 2048);
  ASSERT_FALSE(asked.empty());
  EXPECT_NEAR(asked.back().second, m.decode_batch, 1e-9);
  EXPECT_NEAR(asked.back().first, m.mixed_rows, 1e-9);
  EXPECT_GT(asked.back().first, m.decode_batch + 96);  // a prompt or more per mixed step
  EXPECT_LT(m.output_tokens_per_s, PredictMix(Linear, mix, 24, 64, 2048).output_tokens_per_s);
}

// The window's prefill points say how many decode rows shared their steps.
TEST(StepCurveTest, PrefillPointsKeepTheirDecodeRows) {
  std::vector<StepRecord> steps(4);
  for (size_t i = 0; i < steps.size(); ++i) {
    steps[i].start_us = 1000.0 * i;
    steps[i].end_us = steps[i].start_us + 500;
    steps[i].num_prefill_tokens = 100;
    steps[i].num_decode_tokens = i < 2 ? 6 : 10;  // 106 and 110 rows: one 2^(1/4) bucket
    steps[i].num_seqs = steps[i].num_decode_tokens + 1;
  }
  const StepCurve c = CurveFromSteps(steps);
  ASSERT_EQ(c.prefill.size(), 1u);
  EXPECT_NEAR(c.prefill[0].decode_rows, 8, 1e-9);
}

TEST(StepCurveTest, PlanUsesTheRequestMix) {
  using testing_diag::StepSpec;
  StepSpec s;  // each request arrives after a pause and is served in one prefill step
  s.running = 1;
  s.prefill_tokens = 8;
  const auto steps =
      testing_diag::Steps(testing_diag::Small(), testing_diag::TrueModel{}, s, 5, 200000);
  auto plan_for = [&](double prompt, double output) {
    auto ctx = testing_diag::TestContext(testing_diag::Small(), 64);
    ctx.mean_prompt_tokens = prompt;
    ctx.mean_output_tokens = output;
    return Analyze(steps, 0, steps.back().end_us + 200000, testing_diag::TestCalibration(), ctx);
  };
  const auto shorts = plan_for(32, 64);
  const auto longs = plan_for(1500, 64);
  ASSERT_FALSE(shorts.plan.actions.empty());
  ASSERT_FALSE(longs.plan.actions.empty());
  const Action& a = shorts.plan.actions.back();
  const Action& b = longs.plan.actions.back();
  ASSERT_EQ(a.kind, ActionKind::kRaiseClientConcurrency);
  ASSERT_EQ(b.kind, ActionKind::kRaiseClientConcurrency);
  EXPECT_LT(b.tokens_per_s_after, a.tokens_per_s_after);
  EXPECT_GT(b.prefill_share, a.prefill_share);
  EXPECT_GT(a.expected_error, 0);
  bool named = false;
  for (const FailureMode& f : b.tradeoffs) named |= f.name == "workload_mix";
  EXPECT_TRUE(named);
}

// A probed size's point is its best repeat (a stalled repeat does not count) times the typical
// step over the best, pooled over the sizes timed more than once (the median of their median
// / best); repeats that agree leave the best as it is.
TEST(StepCurveTest, ProbePointsAreTheBestTimesScaledToATypicalStep) {
  StepProbe probe;
  probe.series.push_back(ProbeSeries{false, 4, 64, {300, 100, 110}});  // median / best 1.10
  probe.series.push_back(ProbeSeries{false, 8, 64, {220, 200, 210}});  // 1.05
  probe.series.push_back(ProbeSeries{false, 1, 64, {50}});             // one repeat: no ratio
  probe.series.push_back(ProbeSeries{true, 32, 0, {900, 990}});        // 1.05
  const StepCurve c = CurveFromProbe(probe);
  ASSERT_EQ(c.decode.size(), 3u);
  EXPECT_EQ(c.decode[0].x, 1);  // sorted by size
  EXPECT_EQ(c.decode[1].x, 4);
  EXPECT_NEAR(c.decode[0].us, 50 * 1.05, 1e-9);
  EXPECT_NEAR(c.decode[1].us, 100 * 1.05, 1e-9);  // not the stalled 300, nor 110 alone
  EXPECT_NEAR(c.decode[2].us, 200 * 1.05, 1e-9);
  EXPECT_NEAR(c.decode[1].spread, (262.0 - 102.0) / 110, 1e-9);
  EXPECT_EQ(c.decode[1].samples, 3);
  ASSERT_EQ(c.prefill.size(), 1u);
  EXPECT_NEAR(c.prefill[0].us, 900 * 1.05, 1e-9);
  EXPECT_TRUE(CurveFromProbe(probe, 2).decode.size() == 2);  // the single sample is dropped
  // Repeats that agree: the best stands (size 4 at 300 is then over 1.3x size 8's 220, a
  // stalled measurement, and is dropped: ProbeSizeSlowerThanALargerOneIsDropped).
  for (ProbeSeries& s : probe.series) std::fill(s.wall_us.begin(), s.wall_us.end(), s.wall_us[0]);
  const StepCurve agree = CurveFromProbe(probe);
  ASSERT_EQ(agree.decode.size(), 2u);
  EXPECT_DOUBLE_EQ(agree.decode[1].us, 220);
}

// More rows never run faster: a probed decode size over 1.3x the time of a larger one is a
// stalled best of few repeats (measured: batch 33 at 64 ms between 18.8 at 32 and about 45
// at 64), and is dropped rather than pooled into the larger sizes.
TEST(StepCurveTest, ProbeSizeSlowerThanALargerOneIsDropped) {
  StepProbe probe;
  for (auto [rows, us] : {std::pair{16, 12000.0},
                          {32, 18800.0},
                          {33, 64300.0},
                          {64, 45000.0},
                          {65, 46000.0},
                          {128, 69000.0}}) {
    probe.series.push_back(ProbeSeries{false, rows, 128, {us}});
  }
  const StepCurve c = CurveFromProbe(probe);
  std::vector<double> xs;
  for (const CurvePoint& p : c.decode) xs.push_back(p.x);
  EXPECT_EQ(xs, (std::vector<double>{16, 32, 64, 65, 128}));
  // A stair (17 rows a little slower than 16: one more tile) is kept.
  probe.series.push_back(ProbeSeries{false, 17, 128, {14000}});
  EXPECT_EQ(CurveFromProbe(probe).decode.size(), 6u);
}

// A probed size timed slower than a larger one, but within 1.3x, takes the larger one's time:
// a best of repeats only overstates a step, so the larger size bounds it from above (measured:
// batch 128 once at 107 ms, 129 at 90.9; pooled, 99 ms stood where served steps ran near 55).
// Sizes in order keep their own times.
TEST(StepCurveTest, ProbeSizeSlowerThanALargerOneTakesItsTime) {
  StepProbe probe;
  for (auto [rows, us] : {std::pair{64, 28200.0}, {65, 33000.0}, {128, 107000.0}, {129, 90900.0}}) {
    probe.series.push_back(ProbeSeries{false, rows, 128, {us}});
  }
  const StepCurve c = CurveFromProbe(probe);
  ASSERT_EQ(c.decode.size(), 4u);
  EXPECT_DOUBLE_EQ(c.decode[0].us, 28200);
  EXPECT_DOUBLE_EQ(c.decode[1].us, 33000);
  EXPECT_DOUBLE_EQ(c.decode[2].us, 90900);
  EXPECT_DOUBLE_EQ(c.decode[3].us, 90900);
}

TEST(StepCurveTest, MergeKeepsTheWindowAndScalesTheProbeBeyondIt) {
  StepCurve window, probe;
  window.decode = {{2, 2200, 0.01, 10}, {16, 5000, 0.01, 10}};
  // The probe ran on a quieter machine: every step half as long as the window's. The overlap
  // spans probe steps 1,100-2,500 us, wide enough to read that as a share, not a time per step.
  for (double x : {1, 2, 4, 8, 16, 32})
    probe.decode.push_back({x, 0.5 * (1800 + 200 * x), 0.05, 3});
  probe.prefill = {{64, 5000, 0.02, 3}, {256, 15000, 0.02, 3}};
  const StepCurve m = MergeCurves(window, probe);
  ASSERT_EQ(m.decode.size(), 4u);          // 1, 2 (window), 16 (window), 32
  EXPECT_DOUBLE_EQ(m.decode[1].us, 2200);  // the window's own point, unscaled
  EXPECT_EQ(m.decode[1].samples, 10);
  EXPECT_NEAR(m.decode[0].us, 2000, 1e-9);  // probe x 2 (the window / probe ratio)
  EXPECT_NEAR(m.decode[3].us, 1800 + 200 * 32, 1e-9);
  EXPECT_GE(m.decode[3].spread, 0.05);
  EXPECT_NEAR(m.decode[3].error, 0, 1e-9);  // the line through the overlap fits it exactly
  // No window prefill: the decode ratio carries over.
  ASSERT_EQ(m.prefill.size(), 2u);
  EXPECT_NEAR(m.prefill[1].us, 30000, 1e-9);
  const CurveLookup l = Interpolate(m.decode, 24);
  EXPECT_TRUE(l.in_range);
  EXPECT_NEAR(l.us, 1800 + 200 * 24, 1e-6);
}

// A window faster than the probe's best (a small batch served back to back, its weights kept
// warm in the cache) keeps its own points but does not scale the probe's larger shapes down;
// a slower one (load) does scale them up.
TEST(StepCurveTest, OnlyASlowerWindowScalesTheProbe) {
  StepCurve probe;
  probe.decode = {{1, 1000, 0.01, 3}, {2, 1100, 0.01, 3}, {32, 4000, 0.01, 3}};
  StepCurve window;
  window.decode = {{1, 700, 0.01, 400}};
  StepCurve m = MergeCurves(window, probe);
  ASSERT_EQ(m.decode.size(), 3u);
  EXPECT_DOUBLE_EQ(m.decode[0].us, 700);
  EXPECT_DOUBLE_EQ(m.decode[2].us, 4000);
  window.decode = {{1, 1300, 0.01, 400}};
  m = MergeCurves(window, probe);
  // One overlapping batch: 1.3x of each step (5,200 us at 32) or 300 us a step (4,300): the
  // middle, with half the distance in the error.
  EXPECT_NEAR(m.decode[2].us, (1.3 * 4000 + 4300) / 2, 1e-9);
  EXPECT_NEAR(m.decode[2].error, (1.3 * 4000 - 4300) / 2 / m.decode[2].us, 1e-9);
}

// Two overlapping batches whose probe steps lie 1.5x apart or more tell a time per step from a
// share of the step: serving work of 500 us a step carries as 500 us, not as a ratio.
TEST(StepCurveTest, AWideOverlapTellsATimePerStepFromAShare) {
  StepCurve probe, window;
  for (auto [x, us] : {std::pair{1.0, 1000.0}, {4.0, 2000.0}, {32.0, 8000.0}}) {
    probe.decode.push_back({.x = x, .us = us, .spread = 0.01, .samples = 3, .error = 0.01});
  }
  window.decode = {{.x = 1, .us = 1500, .spread = 0.1, .samples = 50, .error = 0.02},
                   {.x = 4, .us = 2500, .spread = 0.1, .samples = 50, .error = 0.02}};
  const StepCurve m = MergeCurves(window, probe);
  ASSERT_EQ(m.decode.size(), 3u);
  EXPECT_NEAR(m.decode[2].us, 8500, 1e-6);
  EXPECT_NEAR(m.decode[2].error, std::hypot(0.01, 0.02), 1e-9);  // probe's, window's
  // Ratios 1.5 and 1.25 (the share reading) would have put it at 10,000 or more.
}

TEST(StepCurveTest, MergeWithoutOverlapKeepsTheProbeAsMeasured) {
  StepCurve window, probe;
  window.decode = {{64, 9000, 0.01, 4}};  // beyond the probe's range: no ratio
  probe.decode = {{1, 1000, 0.01, 3}, {8, 2000, 0.01, 3}};
  const StepCurve m = MergeCurves(window, probe);
  ASSERT_EQ(m.decode.size(), 3u);
  EXPECT_DOUBLE_EQ(m.decode[0].us, 1000);
  EXPECT_DOUBLE_EQ(m.decode[2].us, 9000);
}

std::vector<StepRecord> DecodeSteps(const std::vector<double>& walls, int rows = 4) {
  std::vector<StepRecord> steps;
  double t = 0;
  for (double wall : walls) {
    StepRecord r;
    r.num_seqs = r.num_decode_tokens = rows;
    r.start_us = t;
    r.end_us = t + wall;
    t += wall;
    steps.push_back(r);
  }
  return steps;
}

// A window point's error is its mean's (about twice the standard error), not its single steps'
// spread, and steps that ran in runs of alike times (a burst of other load) count as fewer.
TEST(StepCurveTest, AWindowPointCarriesTheErrorOfItsMean) {
  std::vector<double> alternating, runs;
  for (int i = 0; i < 100; ++i) {
    alternating.push_back(i % 2 ? 1100 : 900);
    runs.push_back(i < 50 ? 900 : 1100);
  }
  const CurvePoint a = CurveFromSteps(DecodeSteps(alternating)).decode.at(0);
  const CurvePoint b = CurveFromSteps(DecodeSteps(runs)).decode.at(0);
  EXPECT_NEAR(a.us, 1000, 1e-9);
  EXPECT_NEAR(a.spread, 0.2, 1e-9);
  const double sd = std::sqrt(100 * 100.0 * 100 / 99);  // sample standard deviation
  EXPECT_NEAR(a.error, 2 * sd / 10 / 1000, 1e-9);       // 100 independent steps
  // Lag-1 autocorrelation 0.98, taken as 0.9: 100 x 0.1 / 1.9 = 5.3 effective steps.
  EXPECT_NEAR(b.error, 2 * sd / std::sqrt(100 * 0.1 / 1.9) / 1000, 1e-9);
  EXPECT_EQ(b.spread, a.spread);
}

TEST(StepCurveTest, WindowDriftComparesTheHalvesAtTheSameRows) {
  std::vector<double> walls(40, 1000);
  EXPECT_EQ(WindowDrift(DecodeSteps(walls)), 0);
  for (int i = 20; i < 40; ++i) walls[i] = 1200;
  EXPECT_NEAR(WindowDrift(DecodeSteps(walls)), 0.2, 1e-9);
  // Different rows in each half: nothing to compare.
  std::vector<StepRecord> steps = DecodeSteps(std::vector<double>(20, 1000), 4);
  for (const StepRecord& r : DecodeSteps(std::vector<double>(20, 1500), 8)) steps.push_back(r);
  EXPECT_EQ(WindowDrift(steps), 0);
}

// A decode step right after a step carrying prefill is grouped apart from back-to-back ones.
TEST(StepCurveTest, DecodeStepsAfterPrefillAreGroupedApart) {
  std::vector<StepRecord> steps;
  double t = 0;
  auto add = [&](int prefill, double wall) {
    StepRecord r;
    r.num_seqs = 4;
    r.num_decode_tokens = prefill > 0 ? 3 : 4;
    r.num_prefill_tokens = prefill;
    r.start_us = t;
    r.end_us = t + wall;
    t += wall;
    steps.push_back(r);
  };
  add(0, 1000), add(0, 1000), add(64, 5000), add(0, 1300), add(64, 5000), add(0, 1500);
  add(0, 1000);
  const StepCurve c = CurveFromSteps(steps);
  ASSERT_EQ(c.decode.size(), 1u);
  EXPECT_EQ(c.decode[0].samples, 3);
  EXPECT_NEAR(c.decode[0].us, 1000, 1e-9);
  ASSERT_EQ(c.decode_after_prefill.size(), 1u);
  EXPECT_EQ(c.decode_after_prefill[0].x, 4);
  EXPECT_EQ(c.decode_after_prefill[0].samples, 2);
  EXPECT_NEAR(c.decode_after_prefill[0].us, 1400, 1e-9);
}

TEST(StepCurveTest, ProbedDecodeAfterPrefillIsItsOwnCurveScaledByItsOwnRatio) {
  StepProbe sp;
  // Repeats that agree: the points are the probe's times as they are.
  sp.series.push_back(ProbeSeries{false, 8, 64, {1000, 1000}});
  sp.series.push_back(ProbeSeries{false, 8, 64, {1200, 1200}, true});
  sp.series.push_back(ProbeSeries{false, 2, 64, {600}, true});
  const StepCurve probe = CurveFromProbe(sp);
  ASSERT_EQ(probe.decode.size(), 1u);
  EXPECT_DOUBLE_EQ(probe.decode[0].us, 1000);
  ASSERT_EQ(probe.decode_after_prefill.size(), 2u);
  EXPECT_EQ(probe.decode_after_prefill[0].x, 2);
  EXPECT_DOUBLE_EQ(probe.decode_after_prefill[1].us, 1200);
  // The window's after-prefill steps at batch 2 ran 1.5x the probe's; its back-to-back ones
  // were not measured where the probe has them: each kind keeps its own ratio.
  StepCurve window;
  window.decode_after_prefill = {{2, 900, 0.01, 10}};
  window.decode = {{8, 2000, 0.01, 10}};  // 2x the probe's
  const StepCurve m = MergeCurves(window, probe);
  ASSERT_EQ(m.decode_after_prefill.size(), 2u);
  EXPECT_DOUBLE_EQ(m.decode_after_prefill[0].us, 900);
  // One overlap: the middle of 1.5x (1,800) and + 300 us (1,500).
  EXPECT_NEAR(m.decode_after_prefill[1].us, (1.5 * 1200 + 1500) / 2, 1e-9);
  // Without an after-prefill overlap the back-to-back one stands for it: 2x or + 1,000 us.
  window.decode_after_prefill.clear();
  EXPECT_NEAR(MergeCurves(window, probe).decode_after_prefill[1].us, (2 * 1200 + 2200) / 2, 1e-9);
}

// What a prefill step adds to the decode step after it is pooled over the sizes timed both
// ways (the median difference): one noisy pair does not bend the curve, and a pool that reads
// faster after prefill adds nothing.
TEST(StepCurveTest, ProbedAfterPrefillCostIsPooledOverTheSizes) {
  StepProbe sp;
  for (auto [rows, b2b, after] : {std::tuple{4, 2000.0, 2100.0}, std::tuple{16, 4000.0, 6000.0},
                                  std::tuple{32, 7000.0, 6950.0}}) {
    sp.series.push_back(ProbeSeries{false, rows, 64, {b2b}});
    sp.series.push_back(ProbeSeries{false, rows, 64, {after}, true});
  }
  StepCurve c = CurveFromProbe(sp);
  ASSERT_EQ(c.decode_after_prefill.size(), 3u);
  EXPECT_DOUBLE_EQ(c.decode_after_prefill[0].us, 2100);
  EXPECT_DOUBLE_EQ(c.decode_after_prefill[1].us, 4100);
  EXPECT_DOUBLE_EQ(c.decode_after_prefill[2].us, 7100);
  sp.series[3].wall_us = {3900};  // batch 16 after prefill now reads faster: median -50
  c = CurveFromProbe(sp);
  EXPECT_DOUBLE_EQ(c.decode_after_prefill[1].us, 4000);
  EXPECT_DOUBLE_EQ(c.decode_after_prefill[2].us, 7000);
}

// Decode steps of a mix that carries prefill are looked up with the share that follows a
// prefill step; a decode-only mix has none, and slower after-prefill steps lower the prediction.
TEST(StepCurveTest, MixedWorkloadsWeighDecodeStepsAfterPrefill) {
  std::vector<double> shares;
  auto lookup = [&](double rows, double decodes, bool prefill, double after) {
    if (!prefill) shares.push_back(after);
    return Linear(rows, decodes, prefill, after);
  };
  PredictMix(lookup, WorkloadMix{0, 1e9}, 8, 64, 2048);
  ASSERT_EQ(shares.size(), 1u);
  EXPECT_EQ(shares[0], 0);
  shares.clear();
  const WorkloadMix mix{64, 64};
  const MixPrediction same = PredictMix(lookup, mix, 32, 64, 2048);
  ASSERT_EQ(shares.size(), 1u);
  EXPECT_GT(shares[0], 0);
  EXPECT_LE(shares[0], 1);
  auto slower = [](double rows, double decodes, bool prefill, double after) {
    CurveLookup l = Linear(rows, decodes, prefill, after);
    if (!prefill) l.us *= 1 + 0.3 * after;
    return l;
  };
  EXPECT_LT(PredictMix(slower, mix, 32, 64, 2048).output_tokens_per_s, same.output_tokens_per_s);
}

// New requests from many clients arrive as a Poisson stream: at k = 0.65 per step, 1 - e^-k =
// 48 % of the steps carry prefill, k / (1 - e^-k) = 1.36 prompts each (measured on a closed loop
// of 40 clients: 0.44-0.49 and 1.4), and a decode step follows one of them with that chance.
// Past the token budget every step carries prefill.
TEST(StepCurveTest, ArrivalsBunchAsAPoissonStream) {
  std::vector<double> shares;
  auto lookup = [&](double rows, double decodes, bool prefill, double after) {
    if (!prefill) shares.push_back(after);
    return Linear(rows, decodes, prefill, after);
  };
  const WorkloadMix mix{128, 64};
  const MixPrediction m = PredictMix(lookup, mix, 42, 64, 2048);
  const double k = m.output_tokens_per_step / 64;
  EXPECT_NEAR(k, 0.65, 0.02);
  EXPECT_NEAR(m.prefill_step_fraction, 1 - std::exp(-k), 1e-9);
  EXPECT_NEAR(m.mixed_rows, m.decode_batch + 128 * k / (1 - std::exp(-k)), 1e-9);
  ASSERT_EQ(shares.size(), 1u);
  EXPECT_NEAR(shares[0], m.prefill_step_fraction, 1e-9);
  // Parts add up: k requests of 64 tokens per mean step.
  EXPECT_NEAR(m.output_tokens_per_s, m.output_tokens_per_step / (m.tpot_ms * 1e-3), 1e-6);
  EXPECT_NEAR(
      m.tpot_ms * 1e3,
      m.prefill_step_fraction * m.mixed_step_us + (1 - m.prefill_step_fraction) * m.decode_step_us,
      1e-6);
  // Long prompts under a small budget: every step carries a chunk of the whole budget.
  const MixPrediction full = PredictMix(lookup, WorkloadMix{2048, 16}, 32, 64, 256);
  EXPECT_DOUBLE_EQ(full.prefill_step_fraction, 1);
  EXPECT_LE(full.mixed_rows, 256 + 1e-9);
  EXPECT_GT(full.mixed_rows, 0.9 * 256);
  EXPECT_EQ(full.decode_step_us, 0);
}

// Decode batches timed at two contexts give the step time per context token by batch; the
// long-context series are not curve points.
TEST(StepCurveTest, ContextSlopesComeFromTheProbesTwoContexts) {
  StepProbe sp;
  sp.decode_context = 64;
  sp.long_context = 256;
  sp.series.push_back(ProbeSeries{false, 2, 64, {1000, 1200}});
  sp.series.push_back(ProbeSeries{false, 8, 64, {2000}});
  sp.series.push_back(ProbeSeries{false, 2, 256, {1384, 1500}});
  sp.series.push_back(ProbeSeries{false, 8, 256, {3536}});
  sp.series.push_back(ProbeSeries{false, 8, 64, {2500}, true});  // after prefill: no slope
  const std::vector<CurvePoint> slopes = ContextSlopes(sp);
  ASSERT_EQ(slopes.size(), 2u);
  EXPECT_EQ(slopes[0].x, 2);
  EXPECT_NEAR(slopes[0].us, 384.0 / 192, 1e-9);  // best times: 1384 - 1000 over 192 tokens
  EXPECT_NEAR(slopes[1].us, 1536.0 / 192, 1e-9);
  EXPECT_NEAR(ContextSlopeAt(slopes, 5), 5, 1e-9);    // interpolated
  EXPECT_NEAR(ContextSlopeAt(slopes, 16), 16, 1e-9);  // per row beyond the last batch
  EXPECT_NEAR(ContextSlopeAt(slopes, 1), 1, 1e-9);
  EXPECT_EQ(ContextSlopeAt({}, 4), -1);
  const StepCurve c = CurveFromProbe(sp);
  ASSERT_EQ(c.decode.size(), 2u);                 // the short context only
  EXPECT_NEAR(c.decode[1].us, 2000 * 1.1, 1e-9);  // the typical/best ratio: 1100 / 1000
  sp.long_context = 0;                            // no long context: no slopes
  EXPECT_TRUE(ContextSlopes(sp).empty());
}

TEST(StepCurveTest, MonotoneCurvePoolsPointsMeasuredFasterThanSmallerShapes) {
  std::vector<CurvePoint> pts = {
      {1, 1000, 0.1, 3}, {8, 2600, 0.2, 1}, {16, 1400, 0.3, 3}, {32, 4000, 0.1, 3}};
  MakeMonotone(&pts);
  ASSERT_EQ(pts.size(), 4u);
  EXPECT_DOUBLE_EQ(pts[0].us, 1000);
  EXPECT_DOUBLE_EQ(pts[1].us, (2600 * 1 + 1400 * 3) / 4.0);  // pooled, weighted by samples
  EXPECT_DOUBLE_EQ(pts[2].us, pts[1].us);
  EXPECT_DOUBLE_EQ(pts[2].spread, 0.3);
  EXPECT_EQ(pts[2].x, 16);
  EXPECT_DOUBLE_EQ(pts[3].us, 4000);
  std::vector<CurvePoint> sorted = {{1, 1, 0, 1}, {2, 2, 0, 1}};
  MakeMonotone(&sorted);
  EXPECT_DOUBLE_EQ(sorted[1].us, 2);
}

}  // namespace
}  // namespace saturn
