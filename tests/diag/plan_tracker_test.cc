// PlanTracker: measured vs predicted after an applied action, steady-state steps only.
#include "engine/diag/plan_tracker.h"

#include <gtest/gtest.h>

#include "tests/diag/synthetic.h"

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

}  // namespace
}  // namespace saturn
