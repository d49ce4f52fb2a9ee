// TimerThread: a due-ordered task map and one thread.
#include "server/timer_thread.h"

namespace saturn {

bool TimerThread::Post(Clock::time_point due, std::function<void()> task) {
  std::lock_guard<std::mutex> lock(mu_);
  if (stopping_) return false;
  tasks_.emplace(std::make_pair(due, seq_++), std::move(task));
  if (!thread_.joinable()) thread_ = std::thread([this] { Run(); });
  cv_.notify_one();
  return true;
}

void TimerThread::Stop() {
  std::thread t;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    cv_.notify_one();
    t = std::move(thread_);
  }
  if (t.joinable()) t.join();
  std::lock_guard<std::mutex> lock(mu_);
  tasks_.clear();  // outside the thread: a task's destructor may post nothing now
}

void TimerThread::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    if (tasks_.empty()) {
      cv_.wait(lock);
      continue;
    }
    const auto due = tasks_.begin()->first.first;
    if (Clock::now() < due) {
      cv_.wait_until(lock, due);
      continue;
    }
    std::function<void()> task = std::move(tasks_.begin()->second);
    tasks_.erase(tasks_.begin());
    lock.unlock();
    task();
    task = nullptr;  // destroy captures outside the lock
    lock.lock();
  }
}

}  // namespace saturn
