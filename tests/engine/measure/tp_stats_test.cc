// Tensor-parallel step logs (engine/measure/tp_stats.h): transfer and wait split per collective
// without shared clocks, steps matched across ranks by number, logs carried as bytes.
#include "engine/measure/tp_stats.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace saturn {
namespace {

TpStepEntry Entry(int64_t seq, double start_us, double step_us, std::vector<float> comm) {
  TpStepEntry e;
  e.seq = seq;
  e.start_us = start_us;
  e.step_us = step_us;
  e.comm_us = std::move(comm);
  return e;
}

TEST(TpStatsTest, TransferIsTheLeastTimeAnyRankSpentAndTheRestIsWait) {
  // Step 1: in the first all-reduce rank 1 arrives last (rank 0 waits 30 us), in the second
  // rank 0 does (rank 1 waits 30 us).
  const std::vector<std::vector<TpStepEntry>> logs = {
      {Entry(1, 100, 500, {40, 20})},
      {Entry(1, 0, 480, {10, 50})},
  };
  const TpStats s = CombineTpLogs(logs, 0, 1000);
  EXPECT_EQ(s.ranks, 2);
  EXPECT_EQ(s.steps, 1);
  EXPECT_EQ(s.collectives, 2);
  EXPECT_DOUBLE_EQ(s.transfer_us, 10 + 20);
  EXPECT_DOUBLE_EQ(s.per_rank[0].wait_us, 30);
  EXPECT_DOUBLE_EQ(s.per_rank[1].wait_us, 30);
  EXPECT_DOUBLE_EQ(s.per_rank[0].comm_us, 60);
  EXPECT_DOUBLE_EQ(s.per_rank[0].compute_us, 440);
  EXPECT_DOUBLE_EQ(s.per_rank[1].compute_us, 420);
  EXPECT_DOUBLE_EQ(s.WaitShare(), 60.0 / 120);
  EXPECT_DOUBLE_EQ(s.CommShare(), 60.0 / 500);
  EXPECT_EQ(s.SlowestRank(), 0);
  EXPECT_DOUBLE_EQ(s.SlowestOverFastest(), 440.0 / 420);
  EXPECT_DOUBLE_EQ(s.LoadBalance(), (440.0 + 420) / 2 / 440);
  EXPECT_EQ(s.per_rank[0].RunShare(), -1);  // no schedstat logged
}

TEST(TpStatsTest, ARanksRunShareIsItsThreadsTimeOnACoreOverTheirRunnableTime) {
  std::vector<std::vector<TpStepEntry>> logs = {{Entry(1, 10, 500, {40})},
                                                {Entry(1, 0, 500, {10})}};
  logs[1][0].run_us = 310;
  logs[1][0].wait_us = 190;
  const TpStats s = CombineTpLogs(logs, 0, 100);
  EXPECT_DOUBLE_EQ(s.per_rank[1].RunShare(), 0.62);
  EXPECT_EQ(s.per_rank[0].RunShare(), -1);
}

TEST(TpStatsTest, OnlyRankZerosWindowAndStepsEveryRankLoggedCount) {
  const std::vector<std::vector<TpStepEntry>> logs = {
      {Entry(1, 50, 100, {5}), Entry(2, 150, 100, {5}), Entry(3, 250, 100, {5}),
       Entry(4, 350, 100, {5})},
      // Rank 1 lost step 3 (its log wrapped, say) and logged step 4 with another op count.
      {Entry(1, 0, 100, {5}), Entry(2, 0, 100, {5}), Entry(4, 0, 100, {5, 5})},
  };
  const TpStats s = CombineTpLogs(logs, 100, 400);  // steps 2, 3 and 4 start inside
  EXPECT_EQ(s.steps, 1);                            // only step 2 is whole on both ranks
  EXPECT_DOUBLE_EQ(s.per_rank[1].step_us, 100);
  EXPECT_EQ(CombineTpLogs(logs, 1000, 2000).steps, 0);
  EXPECT_DOUBLE_EQ(CombineTpLogs(logs, 1000, 2000).LoadBalance(), 1);
}

TEST(TpStatsTest, ALogCrossesAsBytesAndTruncatedBytesAreRefused) {
  std::vector<TpStepEntry> log = {Entry(7, 1.5, 300, {1.25f, 2.5f}), Entry(8, 0, 310, {})};
  log[0].run_us = 240;
  log[0].wait_us = 60;
  const std::string bytes = PackTpLog(log);
  std::vector<TpStepEntry> back;
  ASSERT_TRUE(UnpackTpLog(bytes, &back));
  ASSERT_EQ(back.size(), 2u);
  EXPECT_EQ(back[0].seq, 7);
  EXPECT_DOUBLE_EQ(back[0].start_us, 1.5);
  EXPECT_EQ(back[0].comm_us, (std::vector<float>{1.25f, 2.5f}));
  EXPECT_TRUE(back[1].comm_us.empty());
  EXPECT_EQ(back[0].run_us, 240);
  EXPECT_EQ(back[0].wait_us, 60);
  for (size_t cut = 0; cut < bytes.size(); ++cut) {
    EXPECT_FALSE(UnpackTpLog(bytes.substr(0, cut), &back)) << cut;
  }
  EXPECT_FALSE(UnpackTpLog(bytes + "x", &back));
}

}  // namespace
}  // namespace saturn
