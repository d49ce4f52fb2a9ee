// A small persistent parallel-for pool for the CPU backend's ops. The calling thread does a
// share of the work, so a pool of N threads starts N-1 workers. It never runs at the same
// time as OpenBLAS (ops are sequential), so the two together use at most N threads. It owns
// no work queue and must never be called re-entrantly or from two threads at once.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace saturn::cpu {

class ThreadPool {
 public:
  explicit ThreadPool(int num_threads);  // total threads, caller included; clamped to >= 1
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return static_cast<int>(workers_.size()) + 1; }

  // Calls fn(begin, end) on disjoint chunks covering [0, n) and returns when all are done.
  // Chunks hold at least `grain` items (so small ops stay on the calling thread) and are
  // handed out dynamically, a few per thread, so uneven rows (causal attention) balance.
  void ParallelFor(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

 private:
  void WorkerLoop();
  void RunChunks();  // grabs chunks of the current job until none are left

  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable wake_cv_;
  std::condition_variable done_cv_;
  uint64_t generation_ = 0;  // guarded by mu_; bumped once per job
  int checked_in_ = 0;       // guarded by mu_; workers finished with the current job
  bool stop_ = false;        // guarded by mu_

  // The current job; written before generation_ is bumped, read by workers after.
  const std::function<void(int64_t, int64_t)>* fn_ = nullptr;
  int64_t n_ = 0;
  int64_t chunk_ = 1;
  int64_t num_chunks_ = 0;
  std::atomic<int64_t> next_chunk_{0};
};

}  // namespace saturn::cpu
