// The fitted step model recovers known parameters from synthetic records and falls back to
// the calibrated ceilings where the window cannot identify a term.
#include "engine/diag/step_model.h"

#include <gtest/gtest.h>

#include "tests/engine/diag/synthetic.h"

namespace saturn {
namespace {

using testing_diag::MakeStep;
using testing_diag::StepSpec;
using testing_diag::TrueModel;

TEST(StepModelTest, RecoversRatesAndHostFromManyBatchSizes) {
  const ModelConfig m = testing_diag::Small();
  TrueModel t;
  t.host_us = 150;
  t.host_us_per_seq = 3;
  t.bytes_per_us = 8e3;  // 8 GB/s effective, under the calibrated 10
  t.flops_per_us = 4e4;  // 40 GFLOP/s effective, under the calibrated 100
  std::vector<StepRecord> steps;
  double at = 0;
  for (int b : {1, 2, 4, 8, 16, 32, 64, 128}) {
    for (int i = 0; i < 3; ++i) {
      StepSpec s;
      s.seqs = b;
      s.context = 50 + 10 * i;
      steps.push_back(MakeStep(m, t, s, at));
      at = steps.back().end_us;
    }
  }
  const StepModel fit = FitStepModel(steps, testing_diag::TestCalibration(), 0);
  const ClassRates& gemm = fit.rates[size_t(OpClass::kGemm)];
  EXPECT_TRUE(gemm.bandwidth_fitted);
  EXPECT_TRUE(gemm.compute_fitted);
  EXPECT_NEAR(gemm.bytes_per_us, 8e3, 8e3 * 0.01);
  EXPECT_NEAR(gemm.flops_per_us, 4e4, 4e4 * 0.01);
  EXPECT_NEAR(fit.host_us, 150, 1.0);
  EXPECT_NEAR(fit.host_us_per_seq, 3, 0.05);
  EXPECT_LT(fit.fit_error, 0.01);
  // Predicts a batch it never saw.
  StepSpec s;
  s.seqs = 48;
  s.context = 60;
  const StepRecord truth = MakeStep(m, t, s, 0);
  EXPECT_NEAR(fit.PredictUs(CostOf(truth), 48), truth.wall_us(), truth.wall_us() * 0.01);
}

TEST(StepModelTest, OneBatchSizeFitsTheBindingTermAndKeepsTheCalibratedOther) {
  const ModelConfig m = testing_diag::Small();
  TrueModel t;
  t.bytes_per_us = 7e3;
  StepSpec s;  // batch 1 decode: memory side
  const auto steps = testing_diag::Steps(m, t, s, 20);
  const StepModel fit = FitStepModel(steps, testing_diag::TestCalibration(), 0);
  const ClassRates& gemm = fit.rates[size_t(OpClass::kGemm)];
  EXPECT_TRUE(gemm.bandwidth_fitted);
  EXPECT_FALSE(gemm.compute_fitted);
  EXPECT_NEAR(gemm.bytes_per_us, 7e3, 70);
  EXPECT_DOUBLE_EQ(gemm.flops_per_us, 1e5);  // the calibrated ceiling
  EXPECT_NEAR(fit.host_us, 100, 0.5);
  EXPECT_DOUBLE_EQ(fit.host_us_per_seq, 0);  // one batch size: not identifiable
}

TEST(StepModelTest, ChoosesTheAdditiveFormWhenTheStepsSayItIsBetter) {
  const ModelConfig m = testing_diag::Small();
  TrueModel t;
  t.additive = true;
  t.bytes_per_us = 9e3;
  t.flops_per_us = 5e4;
  std::vector<StepRecord> steps;
  for (int b : {1, 3, 8, 24, 64}) {
    StepSpec s;
    s.seqs = b;
    steps.push_back(MakeStep(m, t, s, 0));
  }
  const StepModel fit = FitStepModel(steps, testing_diag::TestCalibration(), 0);
  const ClassRates& gemm = fit.rates[size_t(OpClass::kGemm)];
  EXPECT_TRUE(gemm.additive);
  EXPECT_NEAR(gemm.bytes_per_us, 9e3, 90);
  EXPECT_NEAR(gemm.flops_per_us, 5e4, 500);
  EXPECT_LT(fit.fit_error, 0.01);
}

TEST(StepModelTest, AdditiveDefaultWithOneBatchKeepsTheCalibratedComputeTerm) {
  const ModelConfig m = testing_diag::Small();
  TrueModel t;
  t.additive = true;
  t.flops_per_us = 1e5;  // = calibrated
  t.bytes_per_us = 6e3;
  const auto steps = testing_diag::Steps(m, t, StepSpec{}, 5);
  const StepModel fit = FitStepModel(steps, testing_diag::TestCalibration(), -1);  // cpu: sum
  const ClassRates& gemm = fit.rates[size_t(OpClass::kGemm)];
  EXPECT_TRUE(gemm.additive);
  EXPECT_FALSE(gemm.compute_fitted);
  EXPECT_NEAR(gemm.bytes_per_us, 6e3, 60);
}

// Seven batch-1 decodes and one 8-sequence step that a burst of contention slowed 6x (under
// two busy processes one step in a short window can be): the lone step must not set the
// compute rate, or every larger batch looks FLOP-bound and the plan sees no gain. Two such
// steps that agree identify it as before.
TEST(StepModelTest, AnIntensityOnlyOneStepHasKeepsTheCalibratedComputeTerm) {
  const ModelConfig m = testing_diag::Small();
  TrueModel t;
  t.additive = true;
  t.bytes_per_us = 6e3;
  TrueModel burst = t;
  burst.bytes_per_us /= 6;
  burst.flops_per_us /= 6;
  std::vector<StepRecord> steps = testing_diag::Steps(m, t, StepSpec{}, 7);
  StepSpec eight;
  eight.seqs = 8;
  steps.push_back(MakeStep(m, burst, eight, steps.back().end_us));
  const StepModel lone = FitStepModel(steps, testing_diag::TestCalibration(), -1);  // cpu: sum
  const ClassRates& g = lone.rates[size_t(OpClass::kGemm)];
  EXPECT_FALSE(g.compute_fitted);
  EXPECT_DOUBLE_EQ(g.flops_per_us, 1e5);  // the calibrated ceiling
  // Batching still gains: batch 16 runs well over 4x batch 1's tokens/s.
  StepSpec one, sixteen;
  sixteen.seqs = 16;
  const double t1 = lone.PredictUs(CostOf(MakeStep(m, t, one, 0)), 1);
  const double t16 = lone.PredictUs(CostOf(MakeStep(m, t, sixteen, 0)), 16);
  EXPECT_GT(16 / t16, 4 / t1);
  // Two 8-sequence steps at the true rates: the compute term is fitted from them.
  steps.pop_back();
  for (int i = 0; i < 2; ++i) steps.push_back(MakeStep(m, t, eight, steps.back().end_us));
  const StepModel two = FitStepModel(steps, testing_diag::TestCalibration(), -1);
  EXPECT_TRUE(two.rates[size_t(OpClass::kGemm)].compute_fitted);
  EXPECT_NEAR(two.rates[size_t(OpClass::kGemm)].bytes_per_us, 6e3, 60);
}

TEST(StepModelTest, NoTimedStepsFallsBackToCalibration) {
  const ModelConfig m = testing_diag::Small();
  auto steps = testing_diag::Steps(m, TrueModel{}, StepSpec{}, 3);
  for (StepRecord& r : steps) r.per_op_timed = false;
  const StepModel fit = FitStepModel(steps, testing_diag::TestCalibration(), 0);
  EXPECT_EQ(fit.fitted_steps, 0);
  EXPECT_DOUBLE_EQ(fit.rates[0].bytes_per_us, 1e4);
  EXPECT_NEAR(fit.host_us, 100, 1e-6);  // measured host phases
}

TEST(StepModelTest, CudaDispatchIsNotInsideOps) {
  Calibration cal = testing_diag::TestCalibration();
  cal.backend = "cuda";
  const StepModel fit = FitStepModel({}, cal);
  EXPECT_DOUBLE_EQ(fit.op_overhead_us, 0);
  EXPECT_DOUBLE_EQ(fit.dispatch_us, 1);
}

}  // namespace
}  // namespace saturn
