// The report checks itself: ceilings below what a window achieved are called suspect and
// replaced by the observed maxima (cache-resident models explained); a window far below both
// roofs names the op classes that hold the step back; a step in flight at the window's edge
// is busy time, and a window of too few steps says so. Hand-built windows, no timing.
#include <gtest/gtest.h>

#include "engine/diag/analyzer.h"
#include "proto/render/report_json.h"
#include "proto/render/report_proto.h"
#include "proto/render/report_text.h"
#include "tests/engine/diag/synthetic.h"

namespace saturn {
namespace {

using testing_diag::StepSpec;
using testing_diag::TrueModel;

TEST(SelfCheckTest, CeilingBelowWhatTheWindowAchievedIsSuspect) {
  StepSpec s;
  s.queue_depth = 3;
  s.max_num_seqs = 1;
  const auto m = testing_diag::Small();
  const auto steps = testing_diag::Steps(m, TrueModel{}, s, 10);  // runs at 10 GB/s
  Calibration cal = testing_diag::TestCalibration();
  cal.bandwidth_bytes_per_s = 2.5e9;  // measured on a busy machine: 4x too low
  cal.gemm_flops_per_s = 2.5e10;
  const auto ctx = testing_diag::TestContext(m, 1);
  const auto r = Analyze(steps, 0, steps.back().end_us, cal, ctx);
  const CalibrationCheck& c = r.verdict.calibration_check;
  EXPECT_TRUE(c.suspect);
  EXPECT_FALSE(c.cache_resident);
  ASSERT_FALSE(c.notes.empty());
  EXPECT_NE(c.notes.front().find("too low"), std::string::npos) << c.notes.front();
  EXPECT_GT(c.raw_mbu, 2.0);  // against the calibration, impossible
  EXPECT_NEAR(c.judged_bytes_per_s, c.observed_max_bytes_per_s, 1);
  EXPECT_GT(c.judged_bytes_per_s, 9e9);
  EXPECT_LE(r.profile.mbu, 1.0 + 1e-9);  // the figures shown use the judged ceilings
  for (const ClassProfile& k : r.profile.classes) EXPECT_LE(k.mbu, 1.0 + 1e-9);
  EXPECT_EQ(r.verdict.bottleneck, Bottleneck::kMemoryBound) << r.verdict.summary;
  EXPECT_NE(RenderReport(ToProto(r)).find("SUSPECT"), std::string::npos);
  EXPECT_NE(ReportJson(ToProto(r), true).find("\"suspect\": true"), std::string::npos);
}

TEST(SelfCheckTest, HonestCeilingsAreNotSuspect) {
  StepSpec s;
  s.seqs = 64;
  const auto m = testing_diag::Small();
  const auto steps = testing_diag::Steps(m, TrueModel{}, s, 5);
  const auto r = Analyze(steps, 0, steps.back().end_us, testing_diag::TestCalibration(),
                         testing_diag::TestContext(m, 64));
  EXPECT_FALSE(r.verdict.calibration_check.suspect);
  EXPECT_TRUE(r.verdict.calibration_check.notes.empty());
  EXPECT_EQ(RenderReport(ToProto(r)).find("SUSPECT"), std::string::npos);
}

TEST(SelfCheckTest, CeilingExceededWithinItsNoiseIsJudgedByTheObservedRate) {
  StepSpec s;
  s.queue_depth = 3;
  s.max_num_seqs = 1;
  const auto m = testing_diag::Small();
  const auto steps = testing_diag::Steps(m, TrueModel{}, s, 10);
  const auto ctx = testing_diag::TestContext(m, 1);
  Calibration cal = testing_diag::TestCalibration();
  const double observed = Analyze(steps, 0, steps.back().end_us, cal, ctx)
                              .verdict.calibration_check.observed_max_bytes_per_s;
  ASSERT_GT(observed, 0);
  cal.bandwidth_bytes_per_s = observed / 1.02;  // 2 % under what ran: inside the 5 % noise
  const auto r = Analyze(steps, 0, steps.back().end_us, cal, ctx);
  const CalibrationCheck& c = r.verdict.calibration_check;
  EXPECT_FALSE(c.suspect);
  ASSERT_FALSE(c.notes.empty());
  EXPECT_NE(c.notes.front().find("inside the calibration's noise"), std::string::npos)
      << c.notes.front();
  EXPECT_NEAR(c.judged_bytes_per_s, observed, 1);
  EXPECT_GT(c.raw_mbu, r.profile.mbu);
  EXPECT_LE(r.profile.mbu, 1.0 + 1e-9);  // no figure over 100 %
  for (const ClassProfile& k : r.profile.classes) EXPECT_LE(k.mbu, 1.0 + 1e-9);
}

TEST(SelfCheckTest, CacheResidentModelIsExplained) {
  TrueModel t;
  t.bytes_per_us = 8e4;  // 80 GB/s: from cache
  StepSpec s;
  s.queue_depth = 2;
  s.max_num_seqs = 1;
  const auto m = testing_diag::Small();
  const auto steps = testing_diag::Steps(m, t, s, 20);
  Calibration cal = testing_diag::TestCalibration();
  cal.cache_bytes = 1e9;  // a cache that holds the whole model
  auto ctx = testing_diag::TestContext(m, 1);
  ctx.weight_bytes = 4.0 * double(m.NumParameters());
  const auto r = Analyze(steps, 0, steps.back().end_us, cal, ctx);
  const CalibrationCheck& c = r.verdict.calibration_check;
  EXPECT_TRUE(c.suspect);
  EXPECT_TRUE(c.cache_resident);
  ASSERT_FALSE(c.notes.empty());
  EXPECT_NE(c.notes.front().find("cache"), std::string::npos) << c.notes.front();
  EXPECT_LE(r.profile.mbu, 1.0 + 1e-9);
}

TEST(HeadroomTest, FarBelowBothRoofsNamesTheSlowClass) {
  StepSpec s;
  s.seqs = 64;
  s.context = 1000;
  const auto m = testing_diag::Small();
  auto steps = testing_diag::Steps(m, TrueModel{}, s, 5);
  // Attention 40x slower than its roof: the step is far below both roofs.
  const size_t att = static_cast<size_t>(OpClass::kAttention);
  double at = 0;
  for (StepRecord& r : steps) {
    const double wall = r.wall_us();
    const double extra = 39 * r.by_class[att].device_us;
    r.by_class[att].device_us += extra;
    r.device_busy_us += extra;
    r.start_us = at;
    r.end_us = at + wall + extra;
    at = r.end_us;
  }
  const auto r = Analyze(steps, 0, steps.back().end_us, testing_diag::TestCalibration(),
                         testing_diag::TestContext(m, 64));
  EXPECT_TRUE(r.verdict.far_below_roofs) << r.verdict.step_mfu << " " << r.verdict.step_mbu;
  ASSERT_FALSE(r.verdict.headroom.empty());
  EXPECT_EQ(r.verdict.headroom.front().op_class, OpClass::kAttention);
  EXPECT_GT(r.verdict.headroom.front().step_share, 0.5);
  EXPECT_GT(r.verdict.headroom.front().speedup, 2.0);
  EXPECT_NE(r.verdict.summary.find("far below both roofs"), std::string::npos) << r.verdict.summary;
  EXPECT_EQ(r.plan.note.find("at the compute ceiling"), std::string::npos) << r.plan.note;
}

TEST(HeadroomTest, AtTheCeilingOnlyWhenItIs) {
  StepSpec s;
  s.seqs = 64;
  const auto m = testing_diag::Small();
  TrueModel t;
  t.host_us = 0;
  t.op_overhead_us = 0;
  const auto steps = testing_diag::Steps(m, t, s, 5);
  const auto r = Analyze(steps, 0, steps.back().end_us, testing_diag::TestCalibration(),
                         testing_diag::TestContext(m, 64));
  EXPECT_FALSE(r.verdict.far_below_roofs);
  EXPECT_EQ(r.verdict.bottleneck, Bottleneck::kComputeBound);
  EXPECT_NE(r.plan.note.find("at the compute ceiling"), std::string::npos) << r.plan.note;
}

TEST(WindowTest, StepInFlightAtTheEdgeIsBusy) {
  // Two 6 s steps inside a 15 s window, the third still running for its last 3 s.
  TrueModel t;
  t.bytes_per_us = 0.05e4;  // slow enough for 6 s steps
  StepSpec s;
  s.seqs = 4;
  s.prefill_tokens = 1500;
  const auto m = testing_diag::Small();
  auto steps = testing_diag::Steps(m, t, s, 2);
  const double end = steps.back().end_us + 3e6 * (steps[0].wall_us() / 6e6);
  auto ctx = testing_diag::TestContext(m, 4);
  const auto no_edge = Analyze(steps, 0, end, testing_diag::TestCalibration(), ctx);
  ctx.edge_busy_us = end - steps.back().end_us;
  ctx.step_in_flight = true;
  const auto r = Analyze(steps, 0, end, testing_diag::TestCalibration(), ctx);
  EXPECT_GT(no_edge.profile.idle_share, 0.1);  // what the window saw without the edge
  EXPECT_LT(r.profile.idle_share, 0.01);
  EXPECT_NE(r.verdict.bottleneck, Bottleneck::kUnderloaded) << r.verdict.summary;
  EXPECT_NE(r.verdict.window_note.find("only 2 complete steps"), std::string::npos)
      << r.verdict.window_note;
  EXPECT_NE(r.verdict.summary.find("tentative"), std::string::npos);
}

TEST(WindowTest, OnlyAStepInFlightIsUnknownNotIdle) {
  auto ctx = testing_diag::TestContext(testing_diag::Small(), 4);
  ctx.edge_busy_us = 5e6;
  ctx.step_in_flight = true;
  const auto r = Analyze({}, 0, 5e6, testing_diag::TestCalibration(), ctx);
  EXPECT_EQ(r.verdict.bottleneck, Bottleneck::kUnknown) << r.verdict.summary;
  EXPECT_LT(r.profile.idle_share, 0.01);
}

TEST(WindowTest, ASliverOfAStepAtTheEdgeIsStillIdle) {
  // The window began while the previous step delivered its last events (its end_us is set
  // after them): 1 ms of a 300 ms window is busy, the rest idle.
  auto ctx = testing_diag::TestContext(testing_diag::Small(), 4);
  ctx.edge_busy_us = 1e3;
  const auto r = Analyze({}, 0, 3e5, testing_diag::TestCalibration(), ctx);
  EXPECT_EQ(r.verdict.bottleneck, Bottleneck::kUnderloaded) << r.verdict.summary;
  EXPECT_GT(r.profile.idle_share, 0.99);
}

}  // namespace
}  // namespace saturn
