// BoundedWorker: a deque under one mutex and one thread draining it.
#include "server/bounded_worker.h"

#include <algorithm>
#include <utility>
#include <vector>

namespace saturn {

BoundedWorker::BoundedWorker(int capacity)
    : capacity_(std::max(capacity, 1)), thread_([this] { Loop(); }) {}

BoundedWorker::~BoundedWorker() { Stop(); }

std::optional<int64_t> BoundedWorker::Submit(std::function<void()> run,
                                             std::function<void()> cancel) {
  std::lock_guard<std::mutex> lock(mu_);
  if (stopping_ || static_cast<int>(queue_.size()) >= capacity_) return std::nullopt;
  const int64_t id = next_id_++;
  queue_.push_back(Job{id, std::move(run), std::move(cancel)});
  cv_.notify_one();
  return id;
}

bool BoundedWorker::Cancel(int64_t id) {
  Job job;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = std::find_if(queue_.begin(), queue_.end(), [id](const Job& j) { return j.id == id; });
    if (it == queue_.end()) return false;
    job = std::move(*it);
    queue_.erase(it);
  }
  if (job.cancel) job.cancel();
  return true;
}

void BoundedWorker::Stop() {
  std::deque<Job> left;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    left.swap(queue_);
    cv_.notify_all();
  }
  for (Job& job : left) {
    if (job.cancel) job.cancel();
  }
  if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) thread_.join();
}

int BoundedWorker::waiting() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(queue_.size());
}

void BoundedWorker::Loop() {
  for (;;) {
    Job job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, nothing left
      job = std::move(queue_.front());
      queue_.pop_front();
    }
    job.run();
  }
}

}  // namespace saturn
