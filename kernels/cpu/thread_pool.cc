// ThreadPool (thread_pool.h). Sleeping and waking pair up through sequentially consistent
// atomics: the sleeper announces itself (sleepers_ / caller_sleeping_) before it re-checks
// its condition under mu_, the waker changes the condition before it reads the announcement,
// so one of the two always sees the other and no wake-up is lost.
#include "kernels/cpu/thread_pool.h"

#include <sched.h>

#include <algorithm>
#include <chrono>

#include "kernels/base/clock.h"
#include "kernels/cpu/poll_governor.h"
#include "kernels/schedstat.h"

namespace saturn::cpu {
namespace {

constexpr uint64_t kChunksShift = 16, kIdShift = 32, kMask16 = 0xffff;
constexpr int64_t kMaxChunks = kMask16;
// The caller yields this long for chunks workers are still running before it sleeps.
constexpr int64_t kCallerSpinUs = 2000;

uint64_t Chunks(uint64_t s) { return (s >> kChunksShift) & kMask16; }
uint64_t Next(uint64_t s) { return s & kMask16; }
bool HasWork(uint64_t s) { return Next(s) < Chunks(s); }

// Polls done() for up to spin_us, yielding the core between polls; true once done().
template <typename Done>
bool YieldUntil(int64_t spin_us, const Done& done) {
  if (done()) return true;
  if (spin_us <= 0) return false;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::microseconds(spin_us);
  for (;;) {
    for (int i = 0; i < 16; ++i) {
      sched_yield();  // returns at once when nothing else wants this core
      if (done()) return true;
    }
    if (std::chrono::steady_clock::now() >= deadline) return done();
  }
}

}  // namespace

ThreadPool::ThreadPool(int num_threads, int64_t spin_us) : spin_us_(std::max<int64_t>(0, spin_us)) {
  const size_t n = static_cast<size_t>(std::clamp(num_threads, 1, kMaxThreads) - 1);
  worker_tids_ = std::make_unique<std::atomic<int>[]>(n);  // value-initialised: 0
  for (size_t i = 0; i < n; ++i) workers_.emplace_back([this, i] { WorkerLoop(i); });
}

std::vector<int> ThreadPool::worker_thread_ids() const {
  std::vector<int> out;
  for (size_t i = 0; i < workers_.size(); ++i) out.push_back(worker_tids_[i].load());
  return out;
}

ThreadPool::~ThreadPool() {
  stop_.store(true);
  {
    std::lock_guard<std::mutex> lock(mu_);  // a worker between its check and its wait
  }
  wake_cv_.notify_all();
  for (std::thread& t : workers_) t.join();
}

bool ThreadPool::RunChunks() {
  bool ran = false;
  uint64_t s = state_.load(std::memory_order_acquire);
  while (HasWork(s)) {
    if (!state_.compare_exchange_weak(s, s + 1, std::memory_order_acq_rel,
                                      std::memory_order_acquire)) {
      continue;  // s now holds the current state
    }
    const int64_t begin = static_cast<int64_t>(Next(s)) * chunk_;
    (*fn_)(begin, std::min(n_, begin + chunk_));
    ran = true;
    const int64_t chunks = static_cast<int64_t>(Chunks(s));
    if (done_chunks_.fetch_add(1) + 1 == chunks && caller_sleeping_.load()) {
      std::lock_guard<std::mutex> lock(mu_);
      done_cv_.notify_one();
    }
    s = state_.load(std::memory_order_acquire);
  }
  return ran;
}

void ThreadPool::WorkerLoop(size_t index) {
  worker_tids_[index].store(CurrentThreadId());
  const auto posted = [&] { return stop_.load() || HasWork(state_.load()); };
  PollGovernor governor(spin_us_);
  int64_t backoffs = 0;
  for (;;) {
    const int64_t spin_us = governor.SpinUs(static_cast<int64_t>(NowUs() * 1e3));
    if (governor.backoffs() != backoffs) {
      poll_backoffs_.fetch_add(governor.backoffs() - backoffs, std::memory_order_relaxed);
      backoffs = governor.backoffs();
    }
    YieldUntil(spin_us, [&] { return posted() || parked_.load(std::memory_order_relaxed); });
    if (!posted()) {  // polled out, parked, or not polling at all
      std::unique_lock<std::mutex> lock(mu_);
      sleepers_.fetch_add(1);
      wake_cv_.wait(lock, posted);
      sleepers_.fetch_sub(1);
    }
    if (stop_.load()) return;
    RunChunks();
  }
}

void ThreadPool::ParallelFor(int64_t n, int64_t grain,
                             const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  const int threads = num_threads();
  // A few chunks per thread balance uneven work without much claiming overhead.
  const int64_t max_chunks = std::min<int64_t>({n / grain, int64_t{4} * threads, kMaxChunks});
  if (threads == 1 || max_chunks <= 1) {
    fn(0, n);
    return;
  }
  chunk_ = (n + max_chunks - 1) / max_chunks;
  const int64_t chunks = (n + chunk_ - 1) / chunk_;
  n_ = n;
  fn_ = &fn;
  done_chunks_.store(0, std::memory_order_relaxed);
  parked_.store(false, std::memory_order_relaxed);
  ++job_id_;
  state_.store((uint64_t{job_id_} << kIdShift) | (static_cast<uint64_t>(chunks) << kChunksShift));
  if (sleepers_.load() > 0) {
    std::lock_guard<std::mutex> lock(mu_);
    wake_cv_.notify_all();
  }
  RunChunks();
  // Only chunks a worker claimed can still be running.
  const auto all_done = [&] { return done_chunks_.load(std::memory_order_acquire) == chunks; };
  if (!YieldUntil(kCallerSpinUs, all_done)) {
    caller_sleeping_.store(true);
    {
      std::unique_lock<std::mutex> lock(mu_);
      done_cv_.wait(lock, [&] { return done_chunks_.load() == chunks; });
    }
    caller_sleeping_.store(false);
  }
}

}  // namespace saturn::cpu
