// ThreadPool: workers sleep on a condition variable between jobs; a job is a range split
// into chunks that the caller and the workers claim with one atomic counter.
#include "kernels/cpu/thread_pool.h"

#include <algorithm>

namespace saturn::cpu {

ThreadPool::ThreadPool(int num_threads) {
  for (int i = 1; i < std::max(1, num_threads); ++i)
    workers_.emplace_back([this] { WorkerLoop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_cv_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void ThreadPool::RunChunks() {
  for (;;) {
    const int64_t c = next_chunk_.fetch_add(1, std::memory_order_relaxed);
    if (c >= num_chunks_) return;
    const int64_t begin = c * chunk_;
    (*fn_)(begin, std::min(n_, begin + chunk_));
  }
}

void ThreadPool::WorkerLoop() {
  uint64_t seen = 0;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      wake_cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
    }
    RunChunks();
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++checked_in_;
    }
    done_cv_.notify_one();
  }
}

void ThreadPool::ParallelFor(int64_t n, int64_t grain,
                             const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  const int threads = num_threads();
  // A few chunks per thread balance uneven work without much claiming overhead.
  const int64_t max_chunks = std::min<int64_t>((n + grain - 1) / grain, 4 * threads);
  if (threads == 1 || max_chunks <= 1) {
    fn(0, n);
    return;
  }
  chunk_ = (n + max_chunks - 1) / max_chunks;
  num_chunks_ = (n + chunk_ - 1) / chunk_;
  n_ = n;
  fn_ = &fn;
  next_chunk_.store(0, std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> lock(mu_);
    checked_in_ = 0;
    ++generation_;  // the mutex publishes the job fields to the workers
  }
  wake_cv_.notify_all();
  RunChunks();
  // Wait for every worker, not just every chunk, so none still reads this job afterwards.
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [&] { return checked_in_ == static_cast<int>(workers_.size()); });
  fn_ = nullptr;
}

}  // namespace saturn::cpu
