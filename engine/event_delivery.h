// Token events leave the engine thread here. The engine hands each step's events over in one
// batch; a delivery thread runs the callbacks (the server's tokenizing, message building and
// stream writes) while the engine thread goes on to the next step, as vLLM v1 moves output
// processing off its engine core. Batches are delivered in the order posted, so one request's
// events keep their order, and a bounded number of batches may wait: past it, Post blocks the
// engine thread (backpressure), so a slow consumer costs step time, where the step records
// show it, never unbounded memory.
//
// Before Start (the engine's warm-up) and with threading off, Post runs the callbacks inline.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "engine/request.h"

namespace saturn {

class EventDelivery {
 public:
  struct Item {
    std::shared_ptr<const EventCallback> callback;  // kept alive until delivered
    TokenEvent event;
  };
  using Batch = std::vector<Item>;

  // max_pending_batches: batches posted but not yet being delivered before Post blocks (>= 1).
  explicit EventDelivery(int max_pending_batches = 4);
  ~EventDelivery();  // Stop()
  EventDelivery(const EventDelivery&) = delete;
  EventDelivery& operator=(const EventDelivery&) = delete;

  // Starts the delivery thread. Until then Post delivers inline.
  void Start();
  // Delivers everything posted, then joins the thread; later posts deliver inline.
  void Stop();
  // Hands a batch over (empty: nothing). Returns the microseconds the caller waited for room.
  double Post(Batch batch);
  // Waits until every batch posted so far has been delivered.
  void Flush();

  bool threaded() const { return thread_.joinable(); }
  int64_t batches_delivered() const;

 private:
  void Run();
  static void Deliver(Batch& batch);

  const size_t max_pending_;
  mutable std::mutex mu_;
  std::condition_variable work_cv_;  // wakes the delivery thread
  std::condition_variable room_cv_;  // wakes a blocked Post or Flush
  std::deque<Batch> queue_;          // guarded by mu_
  bool stopping_ = false;            // guarded by mu_
  int64_t posted_ = 0;               // guarded by mu_
  int64_t delivered_ = 0;            // guarded by mu_
  std::thread thread_;
};

}  // namespace saturn
