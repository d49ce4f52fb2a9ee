// The step ring: exact capacity across chunk boundaries, per-op records only in the newest tier,
// windows that start anywhere (with steps ahead of them), and readers beside a pushing engine.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "engine/measure/step_record.h"

namespace saturn {
namespace {

StepRecord Step(int64_t id) {
  StepRecord r;
  r.step_id = id;
  r.start_us = 10.0 * double(id);
  r.end_us = r.start_us + 8;
  r.num_seqs = int(id % 7);
  r.ops.resize(3);
  r.ops[0].issue_begin_us = double(id);
  return r;
}

TEST(StepRingTest, KeepsExactlyCapacityAcrossChunks) {
  for (size_t cap : {1u, 8u, 511u, 512u, 513u, 1500u}) {
    StepRing ring(cap, 4);
    for (int64_t i = 0; i < 2000; ++i) ring.Push(Step(i));
    EXPECT_EQ(ring.size(), cap) << cap;
    EXPECT_EQ(ring.total_steps(), 2000);
    const std::vector<StepRecord> all = ring.Last(100000);
    ASSERT_EQ(all.size(), cap);
    for (size_t k = 0; k < all.size(); ++k) {
      EXPECT_EQ(all[k].step_id, int64_t(2000 - cap + k)) << cap;
    }
    const std::vector<StepRecord> last3 = ring.Last(3);
    ASSERT_EQ(last3.size(), std::min<size_t>(3, cap));
    EXPECT_EQ(last3.back().step_id, 1999);
  }
}

TEST(StepRingTest, OnlyTheNewestStepsKeepTheirOps) {
  StepRing ring(1000, 100);
  for (int64_t i = 0; i < 1200; ++i) ring.Push(Step(i));
  const std::vector<StepRecord> all = ring.Last(1000);
  ASSERT_EQ(all.size(), 1000u);
  for (const StepRecord& r : all) {
    if (r.step_id >= 1100) {
      ASSERT_EQ(r.ops.size(), 3u) << r.step_id;
      EXPECT_EQ(r.ops[0].issue_begin_us, double(r.step_id));  // its own ops, not a neighbour's
    } else {
      EXPECT_TRUE(r.ops.empty()) << r.step_id;
    }
  }
  for (const StepRecord& r : ring.WindowFrom(0, 0)) EXPECT_TRUE(r.ops.empty());
  const std::vector<StepRecord> since = ring.Since(10.0 * 1150);
  ASSERT_EQ(since.size(), 50u);
  EXPECT_EQ(since.front().ops.size(), 3u);
}

TEST(StepRingTest, WindowsStartAnywhereWithStepsAheadOfThem) {
  StepRing ring(3000, 10);
  for (int64_t i = 0; i < 5000; ++i) ring.Push(Step(i));  // holds 2000..4999
  // A start inside the ring, across a chunk edge, with 8 steps ahead of it.
  std::vector<StepRecord> w = ring.WindowFrom(10.0 * 2511 - 1, 8);
  ASSERT_FALSE(w.empty());
  EXPECT_EQ(w.front().step_id, 2503);
  EXPECT_EQ(w.back().step_id, 4999);
  EXPECT_EQ(w.size(), 5000u - 2503u);
  for (size_t k = 1; k < w.size(); ++k) ASSERT_EQ(w[k].step_id, w[k - 1].step_id + 1);
  // A start before the ring's oldest: everything, nothing ahead to add.
  w = ring.WindowFrom(0, 8);
  EXPECT_EQ(w.size(), 3000u);
  EXPECT_EQ(w.front().step_id, 2000);
  // A start after the newest: only the steps ahead of it.
  w = ring.WindowFrom(1e12, 5);
  ASSERT_EQ(w.size(), 5u);
  EXPECT_EQ(w.front().step_id, 4995);
  EXPECT_TRUE(ring.Since(1e12).empty());
  ring.Clear();
  EXPECT_EQ(ring.size(), 0u);
  EXPECT_TRUE(ring.Last(5).empty());
  EXPECT_TRUE(ring.WindowFrom(0, 5).empty());
}

// Readers copy windows while the engine thread pushes (run under TSan in CI): every copy is
// in order and without gaps.
TEST(StepRingTest, ReadersBesideAPushingEngineSeeWholeOrderedWindows) {
  StepRing ring(2000, 64);
  std::atomic<bool> done{false};
  std::thread engine([&] {
    for (int64_t i = 0; i < 20000; ++i) ring.Push(Step(i));
    done = true;
  });
  int reads = 0;
  while (!done.load() || reads < 10) {
    const std::vector<StepRecord> w = ring.WindowFrom(0, 0);
    for (size_t k = 1; k < w.size(); ++k) ASSERT_EQ(w[k].step_id, w[k - 1].step_id + 1);
    EXPECT_LE(w.size(), 2000u);
    const std::vector<StepRecord> l = ring.Last(70);
    for (size_t k = 1; k < l.size(); ++k) ASSERT_EQ(l[k].step_id, l[k - 1].step_id + 1);
    ++reads;
  }
  engine.join();
  EXPECT_EQ(ring.Last(1).front().step_id, 19999);
}

}  // namespace
}  // namespace saturn
