// A small persistent parallel-for pool for the CPU backend's ops. The calling thread does a
// share of the work, so a pool of N threads starts N-1 workers. It never runs at the same
// time as OpenBLAS (ops are sequential), so the two together use at most N threads. It owns
// no work queue and must never be called re-entrantly or from two threads at once.
//
// A decode step is a few hundred ops of tens of microseconds each. Two things keep a worker's
// wake-up off that path: the caller waits only for chunks a worker has actually claimed, not
// for every worker to check in (a worker the OS has not scheduled yet simply misses the job,
// and the caller runs its chunks), and a worker that finished a job polls for the next one
// for spin_us, yielding the core on each poll, before it sleeps. Each worker polls only while
// its PollGovernor (poll_governor.h) measures its core as its own: on a machine whose cores
// other processes want, polling workers take CPU from them and from the engine thread's host
// phases, and there the workers sleep as soon as a job is done.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace saturn::cpu {

class ThreadPool {
 public:
  // How long an idle worker polls while its governor allows it: longer than the gaps between
  // a step's ops, shorter than the engine's host phases between steps.
  static constexpr int64_t kDefaultSpinUs = 200;

  // num_threads: total threads, caller included; clamped to [1, kMaxThreads]. spin_us: how
  // long an idle worker polls before it sleeps (0: sleeps at once), when its governor allows.
  explicit ThreadPool(int num_threads, int64_t spin_us = kDefaultSpinUs);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  static constexpr int kMaxThreads = 4096;
  int num_threads() const { return static_cast<int>(workers_.size()) + 1; }
  // How often a worker stopped polling because its core was contended (PollGovernor).
  int64_t poll_backoffs() const { return poll_backoffs_.load(std::memory_order_relaxed); }
  // The workers' kernel thread ids (0 for one that has not started yet).
  std::vector<int> worker_thread_ids() const;

  // Calls fn(begin, end) on disjoint chunks covering [0, n) and returns when all are done.
  // Chunks hold at least `grain` items (so small ops stay on the calling thread) and are
  // handed out dynamically, a few per thread, so uneven rows (causal attention) balance.
  void ParallelFor(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);
  // Sends polling workers to sleep until the next ParallelFor: call before work that runs on
  // other threads (an OpenBLAS call), so they do not poll on the cores it needs.
  void Park() { parked_.store(true, std::memory_order_relaxed); }

 private:
  void WorkerLoop(size_t index);
  // Claims and runs chunks of the current job while any are left; false if none was.
  bool RunChunks();

  const int64_t spin_us_;
  std::vector<std::thread> workers_;
  std::unique_ptr<std::atomic<int>[]> worker_tids_;  // one per worker, set as it starts
  std::mutex mu_;                                    // only for sleeping and waking
  std::condition_variable wake_cv_;
  std::condition_variable done_cv_;
  // The job: [id:32][chunks:16][next chunk:16]. A chunk is claimed by a compare-exchange
  // that bumps `next`, so a claim can only succeed on the job it read; the job's fields
  // below are written before its state is published and stay put until all its chunks are
  // done, which the claimed chunk is not yet.
  std::atomic<uint64_t> state_{0};
  std::atomic<int64_t> done_chunks_{0};  // of the current job
  std::atomic<int> sleepers_{0};         // workers asleep (or about to be) on wake_cv_
  std::atomic<bool> caller_sleeping_{false};
  std::atomic<bool> stop_{false};
  std::atomic<bool> parked_{false};
  std::atomic<int64_t> poll_backoffs_{0};
  uint32_t job_id_ = 0;  // caller only
  const std::function<void(int64_t, int64_t)>* fn_ = nullptr;
  int64_t n_ = 0;
  int64_t chunk_ = 1;
};

}  // namespace saturn::cpu
