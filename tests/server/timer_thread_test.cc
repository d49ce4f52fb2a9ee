// TimerThread (server/timer_thread.h), the diagnostics service's one background thread: tasks
// run in due order (equal due times in posting order), each exactly once when many threads
// post at once, a task may post the next one (as WatchDiagnostics pacing does), and Stop()
// drops what is not yet due, joins, and refuses later posts. In the ThreadSanitizer job
// (tests/sanitize_thread.sh). Ordering never depends on the machine's speed: a gate task holds
// the thread until every post is in.
#include "server/timer_thread.h"

#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace saturn {
namespace {

using Clock = TimerThread::Clock;
using std::chrono::milliseconds;

// Holds the timer thread in a task until Open().
struct Gate {
  std::promise<void> open;
  std::shared_future<void> opened = open.get_future().share();
  void Post(TimerThread* timer) {
    auto f = opened;
    ASSERT_TRUE(timer->Post(Clock::now(), [f] { f.wait(); }));
  }
  void Open() { open.set_value(); }
};

// Waits (without a deadline of its own: ctest's timeout bounds it) for `n` tasks to report.
struct Done {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<int> order;
  void Add(int i) {
    std::lock_guard<std::mutex> lock(mu);
    order.push_back(i);
    cv.notify_all();
  }
  std::vector<int> WaitFor(size_t n) {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return order.size() >= n; });
    return order;
  }
};

TEST(TimerThreadTest, TasksRunInDueOrderAndEqualDueTimesInPostingOrder) {
  TimerThread timer;
  Gate gate;
  gate.Post(&timer);
  Done done;
  const auto base = Clock::now();
  // Due times 3, 1, 2, 1 (ms after base): due order, the two 1s in posting order.
  const int due_ms[] = {3, 1, 2, 1};
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(timer.Post(base + milliseconds(due_ms[i]), [&done, i] { done.Add(i); }));
  }
  gate.Open();
  EXPECT_EQ(done.WaitFor(4), (std::vector<int>{1, 3, 2, 0}));
}

TEST(TimerThreadTest, ConcurrentPostersEachTaskRunsExactlyOnce) {
  TimerThread timer;
  constexpr int kThreads = 4, kPerThread = 250;
  std::vector<std::atomic<int>> runs(kThreads * kPerThread);
  Done done;
  std::vector<std::thread> posters;
  posters.reserve(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    posters.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        const int id = t * kPerThread + i;
        EXPECT_TRUE(timer.Post(Clock::now(), [&runs, &done, id] {
          runs[id].fetch_add(1);
          done.Add(id);
        }));
      }
    });
  }
  for (std::thread& p : posters) p.join();
  done.WaitFor(runs.size());
  for (size_t i = 0; i < runs.size(); ++i) EXPECT_EQ(runs[i].load(), 1) << "task " << i;
}

TEST(TimerThreadTest, ATaskMayPostTheNextOne) {
  TimerThread timer;
  Done done;
  std::function<void(int)> chain = [&](int i) {
    done.Add(i);
    if (i < 9) EXPECT_TRUE(timer.Post(Clock::now(), [&chain, i] { chain(i + 1); }));
  };
  ASSERT_TRUE(timer.Post(Clock::now(), [&chain] { chain(0); }));
  EXPECT_EQ(done.WaitFor(10), (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
  timer.Stop();  // before `chain` goes out of scope
}

TEST(TimerThreadTest, StopDropsTasksNotYetDueJoinsAndRefusesLaterPosts) {
  TimerThread timer;
  auto ran = std::make_shared<std::atomic<bool>>(false);
  auto alive = std::make_shared<int>(0);  // captured: freed by Stop, not leaked
  ASSERT_TRUE(timer.Post(Clock::now() + std::chrono::hours(1), [ran, alive] { ran->store(true); }));
  EXPECT_EQ(alive.use_count(), 2);
  timer.Stop();
  EXPECT_FALSE(ran->load());
  EXPECT_EQ(alive.use_count(), 1);
  EXPECT_FALSE(timer.Post(Clock::now(), [ran] { ran->store(true); }));
  timer.Stop();  // twice is fine
  EXPECT_FALSE(ran->load());
}

}  // namespace
}  // namespace saturn
