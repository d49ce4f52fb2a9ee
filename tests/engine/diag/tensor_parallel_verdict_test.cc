// The verdict under tensor parallelism (engine/diag/classify.cc): collectives in the step
// records (class comm) and the ranks' logs (AnalyzerContext::tp). COMMUNICATION_BOUND where they
// outweigh the step's own work, saying whether waits for a slow rank or transfer dominate; beside
// any other class, the collectives' share and the ranks' balance; never without collectives.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine/diag/analyzer.h"
#include "engine/diag/recording.h"
#include "tests/engine/diag/synthetic.h"

namespace saturn {
namespace {

constexpr size_t kComm = static_cast<size_t>(OpClass::kComm);

// `n` decode steps of `small` at batch 8 with two all-reduces a layer of `us` each added.
std::vector<StepRecord> StepsWithCollectives(int n, double us) {
  testing_diag::TrueModel t;
  testing_diag::StepSpec s;
  s.seqs = 8;
  s.max_num_seqs = 8;
  std::vector<StepRecord> steps = testing_diag::Steps(testing_diag::Small(), t, s, n);
  const int per_step = 2 * testing_diag::Small().num_layers;
  double shift = 0;
  for (StepRecord& r : steps) {
    r.start_us += shift;
    OpClassStats& c = r.by_class[kComm];
    c.count = per_step;
    c.device_us = per_step * us;
    c.bytes = per_step * 8.0 * 768 * 4;
    r.op_count += per_step;
    r.device_busy_us += c.device_us;
    r.device_span_us += c.device_us;
    r.issue_us += c.device_us;
    shift += c.device_us;
    r.end_us += shift;
  }
  return steps;
}

TpStats Ranks(int steps, double compute0, double compute1, double wait0, double wait1, double comm0,
              double comm1) {
  TpStats s;
  s.ranks = 2;
  s.transport = "Open MPI v4.1.4 (2 ranks, one host)";
  s.steps = steps;
  s.collectives = steps * 24;
  // Rank 1's threads had a core 62 % of the time they were runnable; rank 0's all of it.
  s.per_rank = {{compute0 + comm0, comm0, wait0, compute0, compute0 + comm0, 0},
                {compute1 + comm1, comm1, wait1, compute1, 0.62 * (compute1 + comm1),
                 0.38 * (compute1 + comm1)}};
  s.transfer_us = comm0 - wait0;
  return s;
}

DiagnosticsReport Judge(const std::vector<StepRecord>& steps, const TpStats& tp,
                        const Calibration& cal = testing_diag::TestCalibration()) {
  AnalyzerContext ctx = testing_diag::TestContext(testing_diag::Small(), 8);
  ctx.tp = tp;
  return Analyze(steps, 0, steps.back().end_us, cal, ctx);
}

TEST(TensorParallelVerdictTest, ASlowRanksWaitsMakeItCommunicationBoundAndSayWhichRank) {
  // 24 all-reduces of 2 ms in steps whose own work takes about 44 ms.
  const std::vector<StepRecord> steps = StepsWithCollectives(40, 2000);
  // Rank 1 computes 1.4x longer; rank 0 spends most of its all-reduce time waiting for it.
  const DiagnosticsReport r = Judge(steps, Ranks(40, 1.6e6, 2.24e6, 1.4e6, 0.04e6, 1.92e6, 0.56e6));
  ASSERT_EQ(r.verdict.bottleneck, Bottleneck::kCommunicationBound) << r.verdict.summary;
  EXPECT_STREQ(BottleneckName(r.verdict.bottleneck), "COMMUNICATION_BOUND");
  const TensorParallelProfile& t = r.verdict.tensor_parallel;
  EXPECT_EQ(t.ranks, 2);
  EXPECT_EQ(t.slowest_rank, 1);
  EXPECT_NEAR(t.slowest_over_fastest, 1.4, 1e-9);
  EXPECT_LT(t.load_balance, 0.9);
  EXPECT_GT(t.wait_share, 0.5);
  EXPECT_NEAR(t.collectives_per_step, 24, 1e-9);
  EXPECT_NEAR(t.mean_collective_us, 2000, 1e-6);
  EXPECT_GT(t.comm_vs_roofline_floor, 1);
  EXPECT_NEAR(t.slowest_run_share, 0.62, 1e-9);
  for (const char* part : {"COMMUNICATION_BOUND: collectives take", "wait ",
                           "rank 1 computes 1.40x longer than the fastest",
                           "its threads had a core 62% of the time they were runnable "
                           "(contended"}) {
    EXPECT_NE(r.verdict.summary.find(part), std::string::npos) << part << "\n" << r.verdict.summary;
  }
  bool comm_signal = false;
  for (const Signal& s : r.verdict.signals) comm_signal |= s.name == "comm_share" && s.crossed;
  EXPECT_TRUE(comm_signal);
}

TEST(TensorParallelVerdictTest, BalancedRanksMovingBytesAreTransferBound) {
  const std::vector<StepRecord> steps = StepsWithCollectives(40, 2000);
  const DiagnosticsReport r = Judge(steps, Ranks(40, 1.6e6, 1.61e6, 0.03e6, 0.02e6, 1.92e6, 1.9e6));
  ASSERT_EQ(r.verdict.bottleneck, Bottleneck::kCommunicationBound) << r.verdict.summary;
  EXPECT_NE(r.verdict.summary.find("; transfer "), std::string::npos) << r.verdict.summary;
  EXPECT_NE(r.verdict.summary.find("over Open MPI"), std::string::npos) << r.verdict.summary;
  EXPECT_NE(r.verdict.summary.find("share one host's memory"), std::string::npos);
  EXPECT_GT(r.verdict.tensor_parallel.load_balance, 0.99);
  EXPECT_EQ(r.verdict.tensor_parallel.calibrated_us, 0);  // no link calibrated

  // With the link calibrated: 8 rows of 768 f32 (24 KB) at 10 us + 1 GB/s take 34.6 us, and
  // each all-reduce's transfer (1.92e6 - 0.03e6 us over 40 steps x 24) is about 1,969 us.
  Calibration cal = testing_diag::TestCalibration();
  cal.allreduce_latency_us = 10;
  cal.allreduce_bytes_per_s = 1e9;
  const DiagnosticsReport k =
      Judge(steps, Ranks(40, 1.6e6, 1.61e6, 0.03e6, 0.02e6, 1.92e6, 1.9e6), cal);
  const TensorParallelProfile& t = k.verdict.tensor_parallel;
  EXPECT_NEAR(t.calibrated_us, 10 + 8 * 768 * 4 / 1e3, 1e-6);
  EXPECT_NEAR(t.transfer_us, (1.92e6 - 0.03e6) / (40 * 24), 1e-6);
  EXPECT_NEAR(t.transfer_vs_calibrated, t.transfer_us / t.calibrated_us, 1e-9);
  EXPECT_NE(k.verdict.summary.find("the link was calibrated at"), std::string::npos)
      << k.verdict.summary;
}

TEST(TensorParallelVerdictTest, WithoutCollectivesItIsNeverCommunicationBound) {
  testing_diag::TrueModel t;
  testing_diag::StepSpec s;
  s.seqs = 8;
  s.max_num_seqs = 8;
  const std::vector<StepRecord> steps = testing_diag::Steps(testing_diag::Small(), t, s, 40);
  const DiagnosticsReport r = Judge(steps, TpStats{});
  EXPECT_NE(r.verdict.bottleneck, Bottleneck::kCommunicationBound);
  EXPECT_NE(r.verdict.step_bound, Bottleneck::kCommunicationBound);
  EXPECT_EQ(r.verdict.tensor_parallel.ranks, 0);
  for (const Signal& sig : r.verdict.signals) EXPECT_NE(sig.name, "comm_share");
  EXPECT_EQ(r.verdict.summary.find("tensor parallel"), std::string::npos);
}

TEST(TensorParallelVerdictTest, ASmallCommunicationShareStaysBesideTheStepsOwnClass) {
  // 18 % of the step, under the work's roofline floor: the steps stay MEMORY_BOUND.
  const std::vector<StepRecord> steps = StepsWithCollectives(40, 400);
  const DiagnosticsReport r = Judge(steps, Ranks(40, 1.6e6, 1.62e6, 0.2e6, 0.1e6, 0.38e6, 0.37e6));
  EXPECT_NE(r.verdict.step_bound, Bottleneck::kCommunicationBound) << r.verdict.summary;
  EXPECT_NE(r.verdict.summary.find("; tensor parallel over 2 ranks"), std::string::npos)
      << r.verdict.summary;
  EXPECT_GT(r.verdict.tensor_parallel.comm_share, 0.10);
  EXPECT_LT(r.verdict.tensor_parallel.comm_vs_roofline_floor, 1);
}

// On one host the ranks share its memory bandwidth: the plan offers serving at
// tensor_parallel 1, the step as measured less its collectives, applied by a restart. Across
// hosts (the ranks add bandwidth) it does not.
TEST(TensorParallelVerdictTest, OnOneHostThePlanOffersOneRankWithoutTheCollectives) {
  const std::vector<StepRecord> steps = StepsWithCollectives(40, 400);
  const DiagnosticsReport r = Judge(steps, Ranks(40, 1.6e6, 1.62e6, 0.2e6, 0.1e6, 0.38e6, 0.37e6));
  const Action* tp = nullptr;
  for (const Action& a : r.plan.actions) {
    if (a.kind == ActionKind::kSetTensorParallel) tp = &a;
  }
  ASSERT_NE(tp, nullptr) << r.plan.note;
  EXPECT_STREQ(ActionKindName(tp->kind), "set_tensor_parallel");
  EXPECT_EQ(tp->restart_flags, "--tensor_parallel 1");
  EXPECT_EQ(tp->from, 2);
  EXPECT_EQ(tp->to, 1);
  const double share = r.verdict.tensor_parallel.comm_share;
  EXPECT_NEAR(tp->tokens_per_s_after / tp->tokens_per_s_before, 1 / (1 - share), 1e-9);
  EXPECT_NEAR(tp->tpot_ms_after / tp->tpot_ms_before, 1 - share, 1e-9);
  EXPECT_TRUE(tp->outside_measured);
  bool fit = false;
  for (const FailureMode& f : tp->tradeoffs) fit |= f.name == "weights_fit";
  EXPECT_TRUE(fit);

  TpStats apart = Ranks(40, 1.6e6, 1.62e6, 0.2e6, 0.1e6, 0.38e6, 0.37e6);
  apart.single_host = false;
  for (const Action& a : Judge(steps, apart).plan.actions) {
    EXPECT_NE(a.kind, ActionKind::kSetTensorParallel) << a.what;
  }
  testing_diag::TrueModel t;
  testing_diag::StepSpec s;
  s.seqs = 8;
  s.max_num_seqs = 8;
  for (const Action& a :
       Judge(testing_diag::Steps(testing_diag::Small(), t, s, 40), TpStats{}).plan.actions) {
    EXPECT_NE(a.kind, ActionKind::kSetTensorParallel) << a.what;
  }
}

TEST(TensorParallelVerdictTest, ARecordingKeepsTheRanksAndJudgesTheSame) {
  Recording rec;
  rec.input.steps = StepsWithCollectives(40, 2000);
  rec.input.begin_us = 0;
  rec.input.end_us = rec.input.steps.back().end_us;
  rec.input.context = testing_diag::TestContext(testing_diag::Small(), 8);
  rec.input.context.tp = Ranks(40, 1.6e6, 2.24e6, 1.4e6, 0.04e6, 1.92e6, 0.56e6);
  rec.calibration = testing_diag::TestCalibration();
  absl::StatusOr<Recording> back = RecordingFromJson(RecordingToJson(rec));
  ASSERT_TRUE(back.ok()) << back.status();
  const TpStats& tp = back->input.context.tp;
  EXPECT_EQ(tp.ranks, 2);
  EXPECT_EQ(tp.transport, rec.input.context.tp.transport);
  ASSERT_EQ(tp.per_rank.size(), 2u);
  EXPECT_DOUBLE_EQ(tp.per_rank[1].compute_us, 2.24e6);
  EXPECT_DOUBLE_EQ(tp.per_rank[0].wait_us, 1.4e6);
  EXPECT_NEAR(tp.per_rank[1].RunShare(), 0.62, 1e-12);
  EXPECT_EQ(Judge(back->input.steps, tp).verdict.bottleneck, Bottleneck::kCommunicationBound);
}

}  // namespace
}  // namespace saturn
