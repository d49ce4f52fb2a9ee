// RequestStream: one request's events handed from the engine's event thread to a blocking reader.
#include <condition_variable>
#include <deque>
#include <mutex>

#include "engine/engine.h"
#include "kernels/base/status_macros.h"

namespace saturn {

struct RequestStream::Channel {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<TokenEvent> events;
};

absl::StatusOr<std::unique_ptr<RequestStream>> RequestStream::Open(Engine* engine,
                                                                   GenerateRequest request) {
  std::unique_ptr<RequestStream> s(new RequestStream());
  s->engine_ = engine;
  s->ch_ = std::make_shared<Channel>();
  std::shared_ptr<Channel> ch = s->ch_;
  ASSIGN_OR_RETURN(s->id_, engine->Submit(std::move(request), [ch](const TokenEvent& ev) {
    std::lock_guard<std::mutex> lock(ch->mu);
    ch->events.push_back(ev);
    ch->cv.notify_one();
  }));
  return s;
}

RequestStream::~RequestStream() {
  if (!done_ && engine_ != nullptr) engine_->Cancel(id_);
}

bool RequestStream::Next(TokenEvent* event) {
  if (done_) return false;
  std::unique_lock<std::mutex> lock(ch_->mu);
  ch_->cv.wait(lock, [&] { return !ch_->events.empty(); });
  *event = std::move(ch_->events.front());
  ch_->events.pop_front();
  if (event->final) done_ = true;
  return true;
}

TokenEvent RequestStream::Drain(std::vector<int>* tokens) {
  TokenEvent ev;
  while (Next(&ev)) {
    if (tokens) tokens->insert(tokens->end(), ev.token_ids.begin(), ev.token_ids.end());
    if (ev.final) break;
  }
  return ev;
}

}  // namespace saturn
