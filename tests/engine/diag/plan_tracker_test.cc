// PlanTracker: measured vs predicted after an applied action, steady-state steps only, and
// the steps' drift from the plan's step curve (which separates a machine that slowed down from
// a batching model that was wrong).
#include "engine/diag/plan_tracker.h"

#include <gtest/gtest.h>

#include "tests/engine/diag/synthetic.h"

namespace saturn {
namespace {

StepRecord Decode(double start, double wall_us, int seqs, int prefill = 0) {
  StepRecord r;
  r.start_us = start;
  r.end_us = start + wall_us;
  r.num_seqs = seqs;
  r.num_decode_tokens = prefill > 0 ? seqs - 1 : seqs;
  r.num_prefill_tokens = prefill;
  return r;
}

Action Predicted(double tps, double tpot_ms) {
  Action a;
  a.kind = ActionKind::kRaiseMaxNumSeqs;
  a.what = "raise max_num_seqs 1 -> 8";
  a.tokens_per_s_after = tps;
  a.tpot_ms_after = tpot_ms;
  return a;
}

// An action predicted with the request mix (prefill_share > 0) predicts the engine's output
// tokens/s and the TPOT a request sees, prefill-carrying steps included: both are measured
// over every settled step that carries decodes, tokens as rows sampled; the model's own error
// stays against the pure decode steps, like the drift.
TEST(PlanTrackerTest, AMixPredictionIsMeasuredOverEveryStepCarryingDecodes) {
  PlanTracker t(/*settle_steps=*/1, /*min_steady_steps=*/3);
  const auto ctx = testing_diag::TestContext(testing_diag::Small(), 8);
  Action a = Predicted(90, 120);
  a.prefill_share = 0.4;
  t.RecordApplied(a, StepModel{}, ctx, 100, /*applied_us=*/0);
  auto step = [](double start, double wall, int prefill, int sampled) {
    StepRecord r = Decode(start, wall, 8, prefill);
    r.num_sampled = sampled;
    return r;
  };
  const std::vector<StepRecord> steps = {
      step(0, 500000, 64, 8),        // settling: ignored
      step(500000, 100000, 0, 8),    // pure decode: 8 tokens
      step(600000, 200000, 64, 8),   // 7 decodes + a finished prompt's first token
      step(800000, 100000, 0, 8),    //
      step(900000, 200000, 32, 7)};  // 7 decodes, a prompt chunk not yet finished
  const auto o = t.Evaluate(steps);
  ASSERT_TRUE(o.has_value());
  EXPECT_EQ(o->steady_steps, 4);
  EXPECT_TRUE(o->settled);
  EXPECT_DOUBLE_EQ(o->measured_tpot_ms, 150);             // 600 ms over 4 steps
  EXPECT_NEAR(o->measured_tokens_per_s, 31 / 0.6, 1e-9);  // 31 rows sampled in 600 ms
  EXPECT_DOUBLE_EQ(o->measured_batch, 8);
  EXPECT_DOUBLE_EQ(o->tpot_error, 120.0 / 150 - 1);
}

TEST(PlanTrackerTest, NothingTrackedGivesNothing) {
  PlanTracker t;
  EXPECT_FALSE(t.has_action());
  EXPECT_FALSE(t.Evaluate({Decode(0, 10, 1)}).has_value());
}

TEST(PlanTrackerTest, ComparesSteadyStepsAfterTheChange) {
  PlanTracker t(/*settle_steps=*/2, /*min_steady_steps=*/3);
  const auto ctx = testing_diag::TestContext(testing_diag::Small(), 8);
  t.RecordApplied(Predicted(100, 80), StepModel{}, ctx, 100, /*applied_us=*/1000);
  std::vector<StepRecord> steps = {Decode(0, 500, 1),           // before the change: ignored
                                   Decode(1000, 300000, 8, 5),  // settling: ignored
                                   Decode(301000, 90000, 8),    // settling: ignored
                                   Decode(400000, 100000, 8),
                                   Decode(500000, 100000, 8),
                                   Decode(600000, 100000, 8, 3),  // prefill: not steady decode
                                   Decode(700000, 100000, 8)};
  const auto o = t.Evaluate(steps);
  ASSERT_TRUE(o.has_value());
  EXPECT_EQ(o->steady_steps, 3);
  EXPECT_TRUE(o->settled);
  EXPECT_DOUBLE_EQ(o->measured_batch, 8);
  EXPECT_DOUBLE_EQ(o->measured_tokens_per_s, 80);  // 8 tokens per 100 ms
  EXPECT_DOUBLE_EQ(o->measured_tpot_ms, 100);
  EXPECT_DOUBLE_EQ(o->tokens_per_s_error, 0.25);  // predicted 100 vs measured 80
  EXPECT_DOUBLE_EQ(o->tpot_error, -0.2);          // predicted 80 vs measured 100
  EXPECT_DOUBLE_EQ(o->predicted_tokens_per_s, 100);
}

TEST(PlanTrackerTest, NotSettledWithTooFewSteps) {
  PlanTracker t(1, 3);
  t.RecordApplied(Predicted(10, 100), StepModel{}, AnalyzerContext{}, 10, 0);
  const auto o = t.Evaluate({Decode(0, 100, 1), Decode(100, 100, 1)});
  ASSERT_TRUE(o.has_value());
  EXPECT_EQ(o->steady_steps, 1);
  EXPECT_FALSE(o->settled);
  t.Clear();
  EXPECT_FALSE(t.has_action());
}

TEST(PlanTrackerTest, ModelErrorAtTheBatchReached) {
  // A model that is exact for synthetic steps: the load reached batch 6, not the planned 8.
  const ModelConfig m = testing_diag::Small();
  testing_diag::TrueModel truth;
  std::vector<StepRecord> fit_steps;
  for (int b : {1, 2, 4}) {
    testing_diag::StepSpec s;
    s.seqs = b;
    fit_steps.push_back(testing_diag::MakeStep(m, truth, s, 0));
  }
  const StepModel model = FitStepModel(fit_steps, testing_diag::TestCalibration(), 0);
  PlanTracker t(0, 1);
  t.RecordApplied(Predicted(200, 40), model, testing_diag::TestContext(m, 8), 100, 0);
  testing_diag::StepSpec s;
  s.seqs = 6;
  const auto after = testing_diag::Steps(m, truth, s, 3);
  const auto o = t.Evaluate(after);
  ASSERT_TRUE(o.has_value());
  EXPECT_DOUBLE_EQ(o->measured_batch, 6);
  EXPECT_NEAR(o->model_error, 0.0, 0.01);
  EXPECT_NEAR(o->model_tokens_per_s_at_measured_batch, o->measured_tokens_per_s,
              0.01 * o->measured_tokens_per_s);
}

TEST(PlanTrackerTest, StepTimeDriftAgainstThePlansCurve) {
  // The plan's curve: decode batch 4 takes 50 ms, batch 8 80 ms. After the change the steps at
  // batch 8 take 100 ms: 25 % slower than the curve, so of the prediction's +25 % error (100
  // tok/s predicted, 80 measured) nothing is left once rescaled by the drift.
  StepCurve curve;
  curve.decode = {{.x = 4, .us = 50000, .spread = 0, .samples = 3},
                  {.x = 8, .us = 80000, .spread = 0, .samples = 3}};
  PlanTracker t(/*settle_steps=*/0, /*min_steady_steps=*/3);
  t.RecordApplied(Predicted(100, 80), StepModel{}, AnalyzerContext{}, 100, 0, curve);
  std::vector<StepRecord> steps;
  steps.reserve(4);
  for (int i = 0; i < 4; ++i) steps.push_back(Decode(i * 100000.0, 100000, 8));
  const auto o = t.Evaluate(steps);
  ASSERT_TRUE(o.has_value());
  EXPECT_DOUBLE_EQ(o->tokens_per_s_error, 0.25);
  EXPECT_EQ(o->drift_steps, 4);
  EXPECT_DOUBLE_EQ(o->step_time_drift, 1.25);
  EXPECT_NEAR(o->drift_corrected_error, 0.0, 1e-12);
  // A step whose batch is outside the curve is measured but not compared with it.
  steps.push_back(Decode(400000, 100000, 16));
  EXPECT_EQ(t.Evaluate(steps)->steady_steps, 5);
  EXPECT_EQ(t.Evaluate(steps)->drift_steps, 4);
  EXPECT_DOUBLE_EQ(t.Evaluate(steps)->step_time_drift, 1.25);
  // Faster steps than the curve: a drift under 1, and the rescaled error says the model under-
  // predicted.
  PlanTracker fast(0, 3);
  fast.RecordApplied(Predicted(100, 80), StepModel{}, AnalyzerContext{}, 100, 0, curve);
  std::vector<StepRecord> quick;
  quick.reserve(4);
  for (int i = 0; i < 4; ++i) quick.push_back(Decode(i * 64000.0, 64000, 8));  // 125 tok/s
  const auto f = fast.Evaluate(quick);
  ASSERT_TRUE(f.has_value());
  EXPECT_DOUBLE_EQ(f->step_time_drift, 0.8);
  EXPECT_NEAR(f->drift_corrected_error, 0.0, 1e-12);  // 100 / 0.8 = 125: exact again
  // Verify steps (speculation: 8 sequences, 16 proposed tokens checked) are left out of the
  // drift: no plain step of 8 or 24 rows reads each context once for three rows.
  PlanTracker spec(0, 3);
  spec.RecordApplied(Predicted(100, 80), StepModel{}, AnalyzerContext{}, 100, 0, curve);
  std::vector<StepRecord> verify = steps;
  for (int i = 0; i < 4; ++i) {
    StepRecord r = Decode(500000 + i * 90000.0, 90000, 8);
    r.num_decode_tokens = 24;
    r.spec_verify_seqs = 8;
    r.spec_draft_tokens = 16;
    r.spec_accepted_tokens = 8;
    verify.push_back(r);
  }
  EXPECT_EQ(spec.Evaluate(verify)->drift_steps, 4);
  EXPECT_DOUBLE_EQ(spec.Evaluate(verify)->step_time_drift, 1.25);
  // No curve, or too few steps inside it: no drift.
  PlanTracker blind(0, 3);
  blind.RecordApplied(Predicted(100, 80), StepModel{}, AnalyzerContext{}, 100, 0);
  EXPECT_EQ(blind.Evaluate(steps)->step_time_drift, 0);
  EXPECT_EQ(blind.Evaluate(steps)->drift_steps, 0);
  PlanTracker few(0, 5);
  few.RecordApplied(Predicted(100, 80), StepModel{}, AnalyzerContext{}, 100, 0, curve);
  EXPECT_EQ(few.Evaluate(steps)->step_time_drift, 0);
}

}  // namespace
}  // namespace saturn
