// Token events leave the engine thread here. The engine hands each step's events over in one
// batch; delivery threads run the callbacks (the server's tokenizing, message building and
// stream writes) while the engine thread goes on to the next step, as vLLM v1 moves output
// processing off its engine core. An event goes to thread key % threads (the key is its
// request id), and each thread delivers in the order posted, so one request's events keep their
// order. A bounded number of batches may wait per thread: past it, Post blocks the engine
// thread (backpressure), so a slow consumer costs step time, where the step records show it,
// never unbounded memory.
//
// Before Start (the engine's warm-up) and after Stop, Post runs the callbacks inline.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "engine/request.h"

namespace saturn {

class EventDelivery {
 public:
  struct Item {
    int64_t key = 0;                                // the request id: picks the thread
    std::shared_ptr<const EventCallback> callback;  // kept alive until delivered
    TokenEvent event;
  };
  using Batch = std::vector<Item>;

  // max_pending_batches: batches a thread has queued, not yet delivering, before Post blocks
  // (>= 1).
  explicit EventDelivery(int max_pending_batches = 4);
  ~EventDelivery();  // Stop()
  EventDelivery(const EventDelivery&) = delete;
  EventDelivery& operator=(const EventDelivery&) = delete;

  // Starts `threads` delivery threads (at least 1). Until then Post delivers inline.
  void Start(int threads = 1);
  // Delivers everything posted, then joins the threads; later posts deliver inline.
  void Stop();
  // Hands a batch over (empty: nothing). Returns the microseconds the caller waited for room.
  double Post(Batch batch);
  // Waits until every batch posted so far has been delivered.
  void Flush();

  int threads() const { return static_cast<int>(lanes_.size()); }  // 0: inline
  // Batches delivered, counted per thread (a post split over two threads counts 2).
  int64_t batches_delivered() const;

 private:
  class Lane;
  static void Deliver(Batch& batch);

  const int max_pending_;
  std::vector<std::unique_ptr<Lane>> lanes_;  // the owner's thread only (Start, Stop, Post)
  int64_t delivered_elsewhere_ = 0;           // inline, or by threads already stopped
};

}  // namespace saturn
