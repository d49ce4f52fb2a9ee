// BoundedWorker: jobs run in order on one thread, a full queue is refused without calling
// either callback, Cancel and Stop end waiting jobs through their cancel callback, exactly
// one of run/cancel runs per accepted job.
#include "server/bounded_worker.h"

#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <set>
#include <thread>
#include <vector>

namespace saturn {
namespace {

TEST(BoundedWorkerTest, RunsInOrderOnOneThread) {
  BoundedWorker worker(16);
  std::mutex mu;
  std::vector<int> order;
  std::set<std::thread::id> threads;
  std::promise<void> done;
  for (int i = 0; i < 10; ++i) {
    ASSERT_TRUE(worker
                    .Submit(
                        [&, i] {
                          std::lock_guard<std::mutex> lock(mu);
                          order.push_back(i);
                          threads.insert(std::this_thread::get_id());
                          if (i == 9) done.set_value();
                        },
                        [] { FAIL() << "cancelled"; })
                    .has_value());
  }
  done.get_future().wait();
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
  EXPECT_EQ(threads.size(), 1u);
  EXPECT_EQ(threads.count(std::this_thread::get_id()), 0u);
}

TEST(BoundedWorkerTest, FullQueueIsRefusedAndWaitingJobsCanBeCancelled) {
  BoundedWorker worker(2);
  std::promise<void> started, release;
  std::shared_future<void> release_f = release.get_future().share();
  std::atomic<int> runs{0}, cancels{0};
  ASSERT_TRUE(worker
                  .Submit(
                      [&] {
                        started.set_value();
                        release_f.wait();
                        ++runs;
                      },
                      [&] { ++cancels; })
                  .has_value());
  started.get_future().wait();  // the first job runs: it no longer counts against capacity
  std::optional<int64_t> a = worker.Submit([&] { ++runs; }, [&] { ++cancels; });
  std::optional<int64_t> b = worker.Submit([&] { ++runs; }, [&] { ++cancels; });
  ASSERT_TRUE(a.has_value());
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(worker.waiting(), 2);
  bool refused_called = false;
  EXPECT_FALSE(
      worker.Submit([&] { refused_called = true; }, [&] { refused_called = true; }).has_value());
  EXPECT_TRUE(worker.Cancel(*a));
  EXPECT_FALSE(worker.Cancel(*a));  // only once
  EXPECT_EQ(cancels.load(), 1);
  release.set_value();
  worker.Stop();
  EXPECT_FALSE(refused_called);
  // The running job finished; b either ran or was cancelled by Stop, exactly once.
  EXPECT_EQ(runs.load() + cancels.load(), 3);
  EXPECT_GE(runs.load(), 1);
  EXPECT_FALSE(worker.Submit([] {}, [] {}).has_value());  // stopped
}

TEST(BoundedWorkerTest, StopCancelsEveryWaitingJob) {
  std::atomic<int> runs{0}, cancels{0};
  std::promise<void> started, release;
  {
    BoundedWorker worker(8);
    worker.Submit(
        [&] {
          started.set_value();
          release.get_future().wait();
          ++runs;
        },
        [&] { ++cancels; });
    started.get_future().wait();
    for (int i = 0; i < 5; ++i) worker.Submit([&] { ++runs; }, [&] { ++cancels; });
    std::thread releaser([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      release.set_value();
    });
    worker.Stop();  // cancels the 5 at once, then waits for the running one
    releaser.join();
  }
  EXPECT_EQ(runs.load(), 1);
  EXPECT_EQ(cancels.load(), 5);
}

}  // namespace
}  // namespace saturn
