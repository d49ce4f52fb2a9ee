#include "engine/event_delivery.h"

#include <algorithm>
#include <utility>

#include "kernels/clock.h"

namespace saturn {

EventDelivery::EventDelivery(int max_pending_batches)
    : max_pending_(static_cast<size_t>(std::max(1, max_pending_batches))) {}

EventDelivery::~EventDelivery() { Stop(); }

void EventDelivery::Start() {
  std::lock_guard<std::mutex> lock(mu_);
  if (thread_.joinable()) return;
  stopping_ = false;
  thread_ = std::thread([this] { Run(); });
}

void EventDelivery::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!thread_.joinable()) return;
    stopping_ = true;
    work_cv_.notify_all();
  }
  thread_.join();  // Run delivers what is queued before it returns
  std::lock_guard<std::mutex> lock(mu_);
  thread_ = std::thread();
}

void EventDelivery::Deliver(Batch& batch) {
  for (Item& item : batch) {
    if (item.callback != nullptr && *item.callback) (*item.callback)(item.event);
  }
}

double EventDelivery::Post(Batch batch) {
  if (batch.empty()) return 0;
  std::unique_lock<std::mutex> lock(mu_);
  if (!thread_.joinable()) {
    lock.unlock();
    Deliver(batch);
    std::lock_guard<std::mutex> relock(mu_);
    ++posted_;
    ++delivered_;
    return 0;
  }
  double waited_us = 0;
  if (queue_.size() >= max_pending_) {
    const double t0 = NowUs();
    room_cv_.wait(lock, [&] { return queue_.size() < max_pending_; });
    waited_us = NowUs() - t0;
  }
  queue_.push_back(std::move(batch));
  ++posted_;
  work_cv_.notify_one();
  return waited_us;
}

void EventDelivery::Flush() {
  std::unique_lock<std::mutex> lock(mu_);
  const int64_t target = posted_;
  room_cv_.wait(lock, [&] { return delivered_ >= target || !thread_.joinable(); });
}

int64_t EventDelivery::batches_delivered() const {
  std::lock_guard<std::mutex> lock(mu_);
  return delivered_;
}

void EventDelivery::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    work_cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, and everything posted is delivered
    Batch batch = std::move(queue_.front());
    queue_.pop_front();
    room_cv_.notify_all();  // a Post blocked on a full queue may go on
    lock.unlock();
    Deliver(batch);
    batch.clear();  // callbacks and events are released off the lock
    lock.lock();
    ++delivered_;
    room_cv_.notify_all();
  }
}

}  // namespace saturn
