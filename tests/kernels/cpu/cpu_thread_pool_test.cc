// ThreadPool (kernels/cpu/thread_pool.h): every index of every job is run exactly once and
// ParallelFor returns only after all of them, whether the workers are polling (back-to-back
// jobs), asleep (spin 0, or jobs after an idle gap) or slow (a chunk that blocks), for pool
// sizes of 1 to 4 threads; chunks respect the grain; a polling worker that shares its core
// with a busy thread stops polling (its PollGovernor sees the run-queue wait).
#include <gtest/gtest.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "kernels/cpu/poll_governor.h"
#include "kernels/cpu/thread_pool.h"

namespace saturn::testing {
namespace {

// Runs one job over [0, n) and checks each index was visited exactly once.
void ExpectEachOnce(cpu::ThreadPool& pool, int64_t n, int64_t grain, int64_t slow_begin = -1) {
  std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
  std::atomic<int64_t> min_chunk{n};
  pool.ParallelFor(n, grain, [&](int64_t b, int64_t e) {
    ASSERT_LT(b, e);
    if (e < n) min_chunk.store(std::min(min_chunk.load(), e - b));
    if (b == slow_begin) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)].fetch_add(1);
  });
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 1) << i;
  EXPECT_GE(min_chunk.load(), std::min(grain, n)) << "n " << n << " grain " << grain;
}

TEST(ThreadPoolTest, EveryIndexOnceBackToBack) {
  for (int threads : {1, 2, 4}) {
    for (int64_t spin_us : {int64_t{0}, int64_t{200}}) {  // sleeping and polling workers
      SCOPED_TRACE(::testing::Message() << threads << " threads, spin " << spin_us);
      cpu::ThreadPool pool(threads, spin_us);
      EXPECT_EQ(pool.num_threads(), threads);
      for (int rep = 0; rep < 300; ++rep) ExpectEachOnce(pool, 1 + rep % 97, 1 + rep % 5);
    }
  }
}

TEST(ThreadPoolTest, AfterIdleGapsAndWithASlowChunk) {
  cpu::ThreadPool pool(3, /*spin_us=*/200);
  for (int rep = 0; rep < 5; ++rep) {
    // Longer than the polling: the workers are asleep when the next job comes.
    std::this_thread::sleep_for(std::chrono::microseconds(600));
    ExpectEachOnce(pool, 1000, 10);
    ExpectEachOnce(pool, 64, 1, /*slow_begin=*/0);  // the caller waits for the slow chunk
  }
}

TEST(ThreadPoolTest, ClampsThreadsAndRunsSmallJobsInline) {
  cpu::ThreadPool pool(0);
  EXPECT_EQ(pool.num_threads(), 1);
  cpu::ThreadPool two(2);
  const std::thread::id caller = std::this_thread::get_id();
  std::thread::id ran_on;
  two.ParallelFor(10, 100, [&](int64_t b, int64_t e) {  // one chunk: stays on the caller
    EXPECT_EQ(b, 0);
    EXPECT_EQ(e, 10);
    ran_on = std::this_thread::get_id();
  });
  EXPECT_EQ(ran_on, caller);
  int calls = 0;
  two.ParallelFor(0, 1, [&](int64_t, int64_t) { ++calls; });
  EXPECT_EQ(calls, 0);
}

TEST(ThreadPoolTest, WorkerStopsPollingOnACoreABusyThreadWants) {
  if (!ReadThreadSchedStat().available) {
    GTEST_SKIP() << "/proc/thread-self/schedstat is not readable here: workers never poll";
  }
  cpu_set_t old_mask;
  ASSERT_EQ(sched_getaffinity(0, sizeof(old_mask), &old_mask), 0);
  int first = 0;
  while (first < CPU_SETSIZE && !CPU_ISSET(first, &old_mask)) ++first;
  ASSERT_LT(first, CPU_SETSIZE);
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(first, &one);
  // Threads created from here on inherit the one-CPU mask: the caller, the pool's worker and
  // the busy thread all share one core.
  if (sched_setaffinity(0, sizeof(one), &one) != 0) {
    GTEST_SKIP() << "cannot pin this test to one CPU here (sched_setaffinity failed)";
  }
  std::atomic<bool> stop{false};
  std::thread busy([&] {
    while (!stop.load(std::memory_order_relaxed)) {
    }
  });
  int64_t backoffs = 0;
  {
    cpu::ThreadPool pool(2, /*spin_us=*/200);
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (pool.poll_backoffs() == 0 && std::chrono::steady_clock::now() < until) {
      ExpectEachOnce(pool, 64, 1);
    }
    backoffs = pool.poll_backoffs();
  }
  stop.store(true);
  busy.join();
  ASSERT_EQ(sched_setaffinity(0, sizeof(old_mask), &old_mask), 0);
  EXPECT_GT(backoffs, 0) << "the worker kept polling on a core it shared with a busy thread";
}

}  // namespace
}  // namespace saturn::testing
