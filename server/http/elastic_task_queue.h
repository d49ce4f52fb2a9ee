// ElasticTaskQueue: the HTTP servers' worker pool (cpp-httplib's TaskQueue). httplib's own
// ThreadPool starts every thread up front: sized for --max_num_seqs_limit streams, a server
// that never sees an HTTP request held over 300 idle threads. This one starts a thread only
// when a connection finds none idle, up to `max_threads`, and a thread idle for `idle_exit`
// ends while more than `keep_threads` remain. A connection that arrives with all
// `max_threads` busy waits in the queue (as with httplib's pool), never refused.
// shutdown() runs what is queued, then joins every thread. Thread-safe.
#pragma once

#include <httplib.h>

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "absl/time/time.h"

namespace saturn {

class ElasticTaskQueue final : public httplib::TaskQueue {
 public:
  // max_threads >= 1; keep_threads in [0, max_threads].
  ElasticTaskQueue(int max_threads, int keep_threads, absl::Duration idle_exit);
  ~ElasticTaskQueue() override;  // shutdown()
  ElasticTaskQueue(const ElasticTaskQueue&) = delete;
  ElasticTaskQueue& operator=(const ElasticTaskQueue&) = delete;

  void enqueue(std::function<void()> fn) override;
  // Runs the queued jobs, lets running ones finish, joins every thread. Idempotent; jobs
  // enqueued after it are dropped.
  void shutdown() override;

  int threads() const;  // started and not yet ended
  int idle() const;     // of those, waiting for a job

 private:
  void Work();
  // Joins threads that have ended (their std::thread objects were left in `ended_`).
  void JoinEnded();

  const size_t max_threads_;
  const size_t keep_threads_;
  const absl::Duration idle_exit_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  std::unordered_map<std::thread::id, std::thread> threads_;
  std::vector<std::thread> ended_;
  size_t idle_ = 0;
  bool shutdown_ = false;
};

}  // namespace saturn
