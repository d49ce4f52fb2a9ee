// OpenAiCall: the engine-thread queue (the request's engine side is server/request_intake.h) and
// the worker's text assembly.
#include "server/http/openai_call.h"

#include <condition_variable>
#include <deque>
#include <mutex>
#include <utility>

#include "server/http/stop_strings.h"
#include "server/request_intake.h"
#include "server/text_stream.h"

namespace saturn {

struct OpenAiCall::Events {
  EngineCall engine;
  std::mutex mu;
  std::condition_variable cv;
  std::deque<TokenEvent> queue;
  bool aborted = false;  // shutdown past the grace period

  void Push(const TokenEvent& ev) {
    {
      std::lock_guard<std::mutex> lock(mu);
      queue.push_back(ev);
    }
    cv.notify_one();
  }
  void Abort() {
    {
      std::lock_guard<std::mutex> lock(mu);
      aborted = true;
    }
    engine.Cancel();
  }
};

absl::StatusOr<std::unique_ptr<OpenAiCall>> OpenAiCall::Admit(ServingState* state) {
  std::unique_ptr<OpenAiCall> call(new OpenAiCall());
  call->state_ = state;
  call->events_ = std::make_shared<Events>();
  std::weak_ptr<Events> weak = call->events_;
  std::optional<int64_t> token = state->BeginCall([weak] {
    if (auto events = weak.lock()) events->Abort();
  });
  if (!token.has_value()) return absl::UnavailableError("server shutting down");
  call->call_token_ = token;
  call->engine_ = state->engine();
  if (call->engine_ == nullptr) return absl::UnavailableError("model is loading; retry later");
  return call;
}

OpenAiCall::~OpenAiCall() {
  if (!finished_) Cancel();
  if (call_token_.has_value()) state_->EndCall(*call_token_);
}

absl::Status OpenAiCall::Submit(GenerateRequest request, std::vector<std::string> stop,
                                const TextTokenizer* tokenizer, RequestMetrics* metrics) {
  prompt_tokens_ = static_cast<int>(request.prompt.size());
  tokenizer_ = tokenizer;
  text_ = std::make_unique<Utf8Stream>();
  stop_ = std::make_unique<StopStringFilter>(std::move(stop));
  std::shared_ptr<Events> events = events_;
  absl::StatusOr<int64_t> id = events_->engine.Submit(
      engine_, metrics, std::move(request), [events](const TokenEvent& ev) { events->Push(ev); });
  if (!id.ok()) {
    finished_ = true;
    return id.status();
  }
  return absl::OkStatus();
}

void OpenAiCall::Cancel() { events_->engine.Cancel(); }

std::optional<OpenAiCall::Piece> OpenAiCall::Next(absl::Duration timeout) {
  std::deque<TokenEvent> got;
  bool aborted = false;
  {
    std::unique_lock<std::mutex> lock(events_->mu);
    if (!events_->cv.wait_for(lock, absl::ToChronoMilliseconds(timeout),
                              [&] { return !events_->queue.empty(); })) {
      return std::nullopt;
    }
    got.swap(events_->queue);
    aborted = events_->aborted;
  }
  Piece p;
  std::string bytes;
  for (TokenEvent& ev : got) {
    completion_tokens_ += static_cast<int>(ev.token_ids.size());
    if (tokenizer_ != nullptr) {
      for (int id : ev.token_ids) bytes += tokenizer_->TokenBytes(id);
    }
    p.out.token_ids.insert(p.out.token_ids.end(), ev.token_ids.begin(), ev.token_ids.end());
    for (PositionLogprobs& lp : ev.logprobs) p.out.logprobs.push_back(std::move(lp));
    if (!ev.final) continue;
    p.final = true;
    p.usage = ev.usage;
    if (ev.finish_reason == FinishReason::kError) {
      p.error = absl::InternalError(ev.error);
    } else if (ev.finish_reason == FinishReason::kCancelled) {
      p.error = aborted ? absl::UnavailableError(
                              "server shutting down: request cancelled after the shutdown grace "
                              "period")
                        : absl::CancelledError("cancelled");
    } else {
      p.finish_reason = ApiFinishReason(ev.finish_reason);
    }
    break;  // nothing follows a final event
  }
  p.out.text = stop_->Push(text_->Push(bytes));
  if (p.final) {
    p.out.text += stop_->Push(text_->Flush());
    p.out.text += stop_->Flush();
  }
  if (stop_->stopped() && !p.final) {
    // The text reached a stop string: the request ends here, whatever the engine does next,
    // and ends as stopped (its final event says kStop: metrics count it finished, not aborted).
    events_->engine.Cancel(FinishReason::kStop);
    p.final = true;
    p.usage.prompt_tokens = prompt_tokens_;
    p.usage.completion_tokens = completion_tokens_;
  }
  if (stop_->stopped() && p.error.ok()) p.finish_reason = "stop";
  finished_ = finished_ || p.final;
  return p;
}

}  // namespace saturn
