// One background thread that runs posted tasks at their due time, in due order: the
// diagnostics service computes reports and paces WatchDiagnostics streams here so that no
// gRPC thread ever waits or crunches step records. Thread-safe. Tasks must not block for long
// (they run one after another); Stop() drops tasks not yet due and joins.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <thread>
#include <utility>

namespace saturn {

class TimerThread {
 public:
  using Clock = std::chrono::steady_clock;
  TimerThread() = default;
  ~TimerThread() { Stop(); }
  TimerThread(const TimerThread&) = delete;
  TimerThread& operator=(const TimerThread&) = delete;

  // Runs `task` on the thread at `due` (now or past: as soon as possible). Starts the thread on
  // first use. False after Stop (the task is dropped).
  bool Post(Clock::time_point due, std::function<void()> task);
  void Stop();

 private:
  void Run();

  std::mutex mu_;
  std::condition_variable cv_;
  std::multimap<std::pair<Clock::time_point, int64_t>, std::function<void()>> tasks_;
  int64_t seq_ = 0;  // keeps equal due times in posting order
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace saturn
