// PollGovernor (kernels/cpu/poll_governor.h): a worker polls while it waits for its core less
// than a fifth of its runnable time, stops for a back-off that doubles while contention lasts
// (up to its cap) and resets after a clean interval, and never polls where schedstat cannot
// be read. Driven by scripted schedstat counters and explicit times, so nothing depends on
// the machine; one case reads the real counters of this thread.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "kernels/cpu/poll_governor.h"

namespace saturn::testing {
namespace {

using cpu::PollGovernor;
using saturn::SchedStat;

SchedStat g_counters;
SchedStat FakeCounters() { return g_counters; }

constexpr int64_t kMs = 1'000'000;

// `ns` of runnable time pass, `wait_share` of it waiting for a core.
void Runnable(int64_t ns, double wait_share) {
  const auto wait = static_cast<int64_t>(double(ns) * wait_share);
  g_counters.wait_ns += wait;
  g_counters.run_ns += ns - wait;
}

TEST(PollGovernorTest, PollsWhileTheCoreIsItsOwnAndBacksOffUnderContention) {
  g_counters = {.run_ns = 0, .wait_ns = 0, .available = true};
  PollGovernor gov(200, &FakeCounters);
  int64_t t = 1000 * kMs;
  EXPECT_EQ(gov.SpinUs(t), 200);  // first call: the baseline
  // 5 % waiting over an interval: keeps polling.
  t += 25 * kMs;
  Runnable(25 * kMs, 0.05);
  EXPECT_EQ(gov.SpinUs(t), 200);
  EXPECT_EQ(gov.backoffs(), 0);
  // Asleep most of an interval, then 10 ms runnable with 1 ms waiting: still its own core.
  t += 100 * kMs;
  Runnable(10 * kMs, 0.1);
  EXPECT_EQ(gov.SpinUs(t), 200);
  EXPECT_EQ(gov.backoffs(), 0);
  // 40 % waiting: stops for the first back-off (kMinBackoffNs).
  t += 25 * kMs;
  Runnable(25 * kMs, 0.4);
  EXPECT_EQ(gov.SpinUs(t), 0);
  EXPECT_EQ(gov.backoffs(), 1);
  EXPECT_EQ(gov.SpinUs(t + PollGovernor::kMinBackoffNs - 1), 0);
  // After it: polls again from a fresh baseline, still contended: the back-off doubles.
  t += PollGovernor::kMinBackoffNs;
  EXPECT_EQ(gov.SpinUs(t), 200);
  t += 25 * kMs;
  Runnable(25 * kMs, 0.5);
  EXPECT_EQ(gov.SpinUs(t), 0);
  EXPECT_EQ(gov.backoffs(), 2);
  EXPECT_EQ(gov.SpinUs(t + 2 * PollGovernor::kMinBackoffNs - 1), 0);
  // Contention gone: a clean interval resets the back-off to its minimum.
  t += 2 * PollGovernor::kMinBackoffNs;
  EXPECT_EQ(gov.SpinUs(t), 200);
  t += 25 * kMs;
  Runnable(25 * kMs, 0);
  EXPECT_EQ(gov.SpinUs(t), 200);
  t += 25 * kMs;
  Runnable(25 * kMs, 0.5);
  EXPECT_EQ(gov.SpinUs(t), 0);
  EXPECT_EQ(gov.backoffs(), 3);
  EXPECT_EQ(gov.SpinUs(t + PollGovernor::kMinBackoffNs), 200);
}

TEST(PollGovernorTest, BackOffIsCappedAndChecksWaitForAFullInterval) {
  g_counters = {.run_ns = 0, .wait_ns = 0, .available = true};
  PollGovernor gov(50, &FakeCounters);
  int64_t t = 0;
  EXPECT_EQ(gov.SpinUs(t), 50);
  // Within an interval nothing is read: heavy waiting shows only at its end.
  Runnable(PollGovernor::kIntervalNs, 0.9);
  EXPECT_EQ(gov.SpinUs(t + PollGovernor::kIntervalNs - 1), 50);
  int64_t last_backoff = 0;
  for (int i = 0; i < 8; ++i) {
    t += PollGovernor::kIntervalNs;
    Runnable(PollGovernor::kIntervalNs, 0.9);
    ASSERT_EQ(gov.SpinUs(t), 0) << i;
    int64_t off = 1;
    while (gov.SpinUs(t + off * PollGovernor::kMinBackoffNs) == 0) ++off;
    last_backoff = off * PollGovernor::kMinBackoffNs;
    t += last_backoff;
    ASSERT_EQ(gov.SpinUs(t), 50);  // the new baseline
  }
  EXPECT_EQ(last_backoff, PollGovernor::kMaxBackoffNs);
  EXPECT_EQ(gov.backoffs(), 8);
}

TEST(PollGovernorTest, NeverPollsWithoutSchedstatOrWithZeroSpin) {
  g_counters = {.run_ns = 0, .wait_ns = 0, .available = false};
  PollGovernor blind(200, &FakeCounters);
  EXPECT_EQ(blind.SpinUs(0), 0);
  g_counters.available = true;
  EXPECT_EQ(blind.SpinUs(PollGovernor::kMaxBackoffNs), 0);  // stays off
  PollGovernor off(0, &FakeCounters);
  EXPECT_EQ(off.SpinUs(0), 0);
  EXPECT_EQ(off.SpinUs(PollGovernor::kIntervalNs), 0);
}

TEST(PollGovernorTest, ReadsThisThreadsSchedstatWhereLinuxHasIt) {
  // The kernel folds a running thread's time into the counter at ticks and when the thread
  // stops running; sleeping before each read makes sure what ran before it is counted.
  std::this_thread::sleep_for(std::chrono::milliseconds(2));
  const SchedStat a = ReadThreadSchedStat();
  if (!a.available) GTEST_SKIP() << "/proc/thread-self/schedstat is not readable here";
  EXPECT_GT(a.run_ns, 0);  // this thread has run
  EXPECT_GE(a.wait_ns, 0);
  volatile double x = 0;
  for (int i = 0; i < 1000000; ++i) x = x + 1;
  std::this_thread::sleep_for(std::chrono::milliseconds(2));
  const SchedStat b = ReadThreadSchedStat();
  ASSERT_TRUE(b.available);
  EXPECT_GT(b.run_ns, a.run_ns);  // cumulative
  EXPECT_GE(b.wait_ns, a.wait_ns);
}

}  // namespace
}  // namespace saturn::testing
