// Tests for server/http/elastic_task_queue.h: threads start only on demand, never past the cap,
// idle ones end down to the kept number, every job runs (queued ones included at shutdown),
// and shutdown joins them all. Waits are polled with generous deadlines, never timed.
#include "server/http/elastic_task_queue.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <future>
#include <thread>

namespace saturn {
namespace {

// Polls `done` for up to a minute (a busy machine), true once it holds.
bool Eventually(const std::function<bool()>& done) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return done();
}

TEST(ElasticTaskQueueTest, StartsNoThreadUntilAJobArrives) {
  ElasticTaskQueue q(1000, 2, absl::Seconds(30));
  EXPECT_EQ(q.threads(), 0);
  std::promise<void> ran;
  q.enqueue([&] { ran.set_value(); });
  ran.get_future().wait();
  EXPECT_EQ(q.threads(), 1);
  q.shutdown();
  EXPECT_EQ(q.threads(), 0);
}

TEST(ElasticTaskQueueTest, GrowsToTheCapAndQueuesPastIt) {
  constexpr int kCap = 4;
  ElasticTaskQueue q(kCap, 1, absl::Seconds(30));
  std::promise<void> release;
  std::shared_future<void> gate = release.get_future().share();
  std::atomic<int> started{0}, finished{0};
  for (int i = 0; i < kCap + 3; ++i) {
    q.enqueue([&, gate] {
      ++started;
      gate.wait();
      ++finished;
    });
  }
  ASSERT_TRUE(Eventually([&] { return started.load() == kCap; }));
  EXPECT_EQ(q.threads(), kCap);  // the three others wait in the queue: no fifth thread
  EXPECT_EQ(started.load(), kCap);
  release.set_value();
  ASSERT_TRUE(Eventually([&] { return finished.load() == kCap + 3; }));
  EXPECT_EQ(q.threads(), kCap);  // idle_exit is long: nobody has ended yet
}

TEST(ElasticTaskQueueTest, ReusesAnIdleThreadInsteadOfStartingOne) {
  ElasticTaskQueue q(100, 1, absl::Seconds(30));
  for (int i = 0; i < 20; ++i) {
    std::promise<void> ran;
    q.enqueue([&] { ran.set_value(); });
    ran.get_future().wait();
    ASSERT_TRUE(Eventually([&] { return q.idle() == q.threads(); }));
  }
  EXPECT_EQ(q.threads(), 1);
}

TEST(ElasticTaskQueueTest, IdleThreadsEndDownToTheKeptNumber) {
  ElasticTaskQueue q(8, 2, absl::Milliseconds(20));
  std::promise<void> release;
  std::shared_future<void> gate = release.get_future().share();
  std::atomic<int> started{0};
  for (int i = 0; i < 8; ++i) {
    q.enqueue([&, gate] {
      ++started;
      gate.wait();
    });
  }
  ASSERT_TRUE(Eventually([&] { return started.load() == 8; }));
  EXPECT_EQ(q.threads(), 8);
  release.set_value();
  ASSERT_TRUE(Eventually([&] { return q.threads() == 2; })) << q.threads();
  // The ended threads are joined by the next enqueue, and the kept ones still serve.
  std::promise<void> ran;
  q.enqueue([&] { ran.set_value(); });
  ran.get_future().wait();
  EXPECT_EQ(q.threads(), 2);
}

TEST(ElasticTaskQueueTest, ShutdownRunsQueuedJobsAndDropsLaterOnes) {
  ElasticTaskQueue q(1, 1, absl::Seconds(30));
  std::promise<void> release;
  std::shared_future<void> gate = release.get_future().share();
  std::atomic<int> ran{0};
  q.enqueue([&, gate] {
    gate.wait();
    ++ran;
  });
  for (int i = 0; i < 5; ++i) q.enqueue([&] { ++ran; });
  std::thread stopper([&] { q.shutdown(); });
  release.set_value();
  stopper.join();
  EXPECT_EQ(ran.load(), 6);
  EXPECT_EQ(q.threads(), 0);
  q.enqueue([&] { ++ran; });
  EXPECT_EQ(ran.load(), 6);
  q.shutdown();  // idempotent
}

}  // namespace
}  // namespace saturn
