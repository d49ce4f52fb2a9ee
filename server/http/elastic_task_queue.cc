#include "server/http/elastic_task_queue.h"

#include <algorithm>
#include <chrono>
#include <system_error>
#include <utility>

namespace saturn {

ElasticTaskQueue::ElasticTaskQueue(int max_threads, int keep_threads, absl::Duration idle_exit)
    : max_threads_(static_cast<size_t>(std::max(max_threads, 1))),
      keep_threads_(static_cast<size_t>(std::clamp(keep_threads, 0, std::max(max_threads, 1)))),
      idle_exit_(idle_exit) {}

ElasticTaskQueue::~ElasticTaskQueue() { shutdown(); }

void ElasticTaskQueue::enqueue(std::function<void()> fn) {
  JoinEnded();
  std::unique_lock<std::mutex> lock(mu_);
  if (shutdown_) return;
  // Every idle thread takes one queued job; start one more only where the jobs outnumber them.
  if (jobs_.size() + 1 > idle_ && threads_.size() < max_threads_) {
    try {
      std::thread t([this] { Work(); });
      const std::thread::id id = t.get_id();
      threads_.emplace(id, std::move(t));
    } catch (const std::system_error&) {
      // No thread to be had (a process limit): the job waits for a running one. With none
      // running it would wait forever, so it runs here, on the accepting thread.
      if (threads_.empty()) {
        lock.unlock();
        fn();
        return;
      }
    }
  }
  jobs_.push_back(std::move(fn));
  cv_.notify_one();
}

void ElasticTaskQueue::Work() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    ++idle_;
    const bool woken = cv_.wait_for(lock, absl::ToChronoNanoseconds(idle_exit_),
                                    [this] { return !jobs_.empty() || shutdown_; });
    --idle_;
    if (!jobs_.empty()) {
      std::function<void()> job = std::move(jobs_.front());
      jobs_.pop_front();
      lock.unlock();
      job();
      job = nullptr;  // the job's captures are released outside the lock
      lock.lock();
      continue;
    }
    if (shutdown_) break;
    if (!woken && threads_.size() > keep_threads_) break;  // idle for idle_exit_
  }
  // A thread cannot join itself: its std::thread is left for the next enqueue or shutdown.
  auto self = threads_.find(std::this_thread::get_id());
  ended_.push_back(std::move(self->second));
  threads_.erase(self);
  cv_.notify_all();  // shutdown() waits for threads_ to empty
}

void ElasticTaskQueue::JoinEnded() {
  std::vector<std::thread> ended;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ended.swap(ended_);
  }
  for (std::thread& t : ended) t.join();
}

void ElasticTaskQueue::shutdown() {
  {
    std::unique_lock<std::mutex> lock(mu_);
    shutdown_ = true;
    cv_.notify_all();
    cv_.wait(lock, [this] { return threads_.empty(); });
  }
  JoinEnded();
}

int ElasticTaskQueue::threads() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(threads_.size());
}

int ElasticTaskQueue::idle() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(idle_);
}

}  // namespace saturn
