#include "engine/event_delivery.h"

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <utility>

#include "kernels/base/clock.h"

namespace saturn {

// One delivery thread and its queue of batches.
class EventDelivery::Lane {
 public:
  explicit Lane(size_t max_pending) : max_pending_(max_pending) {
    thread_ = std::thread([this] { Run(); });
  }
  ~Lane() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
      work_cv_.notify_all();
    }
    thread_.join();  // Run delivers what is queued before it returns
  }

  double Post(Batch batch) {
    std::unique_lock<std::mutex> lock(mu_);
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

  void Flush() {
    std::unique_lock<std::mutex> lock(mu_);
    const int64_t target = posted_;
    room_cv_.wait(lock, [&] { return delivered_ >= target; });
  }

  int64_t delivered() const {
    std::lock_guard<std::mutex> lock(mu_);
    return delivered_;
  }

 private:
  void Run() {
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

  const size_t max_pending_;
  mutable std::mutex mu_;
  std::condition_variable work_cv_;  // wakes the thread
  std::condition_variable room_cv_;  // wakes a blocked Post or Flush
  std::deque<Batch> queue_;          // guarded by mu_
  bool stopping_ = false;            // guarded by mu_
  int64_t posted_ = 0;               // guarded by mu_
  int64_t delivered_ = 0;            // guarded by mu_
  std::thread thread_;
};

EventDelivery::EventDelivery(int max_pending_batches)
    : max_pending_(std::max(1, max_pending_batches)) {}

EventDelivery::~EventDelivery() { Stop(); }

void EventDelivery::Start(int threads) {
  if (!lanes_.empty()) return;
  for (int i = 0; i < std::max(1, threads); ++i) {
    lanes_.push_back(std::make_unique<Lane>(static_cast<size_t>(max_pending_)));
  }
}

void EventDelivery::Stop() {
  for (const auto& lane : lanes_) {
    lane->Flush();  // everything posted goes out first
    delivered_elsewhere_ += lane->delivered();
  }
  lanes_.clear();  // joins the threads
}

void EventDelivery::Deliver(Batch& batch) {
  for (Item& item : batch) {
    if (item.callback != nullptr && *item.callback) (*item.callback)(item.event);
  }
}

double EventDelivery::Post(Batch batch) {
  if (batch.empty()) return 0;
  if (lanes_.empty()) {
    Deliver(batch);
    ++delivered_elsewhere_;
    return 0;
  }
  if (lanes_.size() == 1) return lanes_[0]->Post(std::move(batch));
  const size_t n = lanes_.size();
  std::vector<Batch> parts(n);
  for (Item& item : batch) {
    const size_t lane = static_cast<size_t>(item.key < 0 ? -item.key : item.key) % n;
    parts[lane].push_back(std::move(item));
  }
  double waited_us = 0;
  for (size_t i = 0; i < n; ++i) {
    if (!parts[i].empty()) waited_us += lanes_[i]->Post(std::move(parts[i]));
  }
  return waited_us;
}

void EventDelivery::Flush() {
  for (const auto& lane : lanes_) lane->Flush();
}

int64_t EventDelivery::batches_delivered() const {
  int64_t n = delivered_elsewhere_;
  for (const auto& lane : lanes_) n += lane->delivered();
  return n;
}

}  // namespace saturn
