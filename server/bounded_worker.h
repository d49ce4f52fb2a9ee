// BoundedWorker: one thread that runs queued jobs in order, with a bounded queue, for calls
// whose work must block (UpdateEngineOptions waits for an engine step boundary) but must hold
// neither a gRPC thread nor a thread of their own: however many calls arrive, the process
// gains exactly one thread, and a full queue is refused at once (the caller answers
// RESOURCE_EXHAUSTED) instead of piling up. Thread-safe.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>

namespace saturn {

class BoundedWorker {
 public:
  // `capacity`: most jobs waiting (the one running not counted), >= 1.
  explicit BoundedWorker(int capacity);
  ~BoundedWorker();  // Stop()
  BoundedWorker(const BoundedWorker&) = delete;
  BoundedWorker& operator=(const BoundedWorker&) = delete;

  // Queues `run`; exactly one of `run` (on the worker thread) or `cancel` (by Cancel or Stop,
  // on the caller's thread) is called later. Returns the job's id, or nullopt, calling
  // neither, when `capacity` jobs are already waiting or the worker stopped.
  std::optional<int64_t> Submit(std::function<void()> run, std::function<void()> cancel);
  // Takes a job that has not started off the queue and calls its `cancel`; false when it
  // already started (or ended, or never existed).
  bool Cancel(int64_t id);
  // Cancels every waiting job, lets the running one finish, joins the thread. Idempotent.
  void Stop();

  int capacity() const { return capacity_; }
  int waiting() const;

 private:
  struct Job {
    int64_t id = 0;
    std::function<void()> run;
    std::function<void()> cancel;
  };
  void Loop();

  const int capacity_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> queue_;
  int64_t next_id_ = 1;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace saturn
