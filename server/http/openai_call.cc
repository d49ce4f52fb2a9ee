// OpenAiCall: the engine-thread queue (each choice's engine side is server/request_intake.h's
// EngineCall) and the worker's text assembly, per choice.
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
  explicit Events(int choices) : engine(choices) {}

  std::vector<EngineCall> engine;  // one per choice, never resized
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::pair<int, TokenEvent>> queue;  // (choice, event), in arrival order
  bool aborted = false;                          // shutdown past the grace period

  void Push(int choice, const TokenEvent& ev) {
    {
      std::lock_guard<std::mutex> lock(mu);
      queue.emplace_back(choice, ev);
    }
    cv.notify_one();
  }
  void Abort() {
    {
      std::lock_guard<std::mutex> lock(mu);
      aborted = true;
    }
    for (EngineCall& e : engine) e.Cancel();
  }
};

struct OpenAiCall::Choice {
  explicit Choice(const std::vector<std::string>& stops) : stop(stops) {}

  int prompt_tokens = 0;
  int completion_tokens = 0;
  Utf8Stream text;
  StopStringFilter stop;
  bool finished = false;  // its final piece was taken (or it was never submitted)
};

absl::StatusOr<std::unique_ptr<OpenAiCall>> OpenAiCall::Admit(ServingState* state, int choices) {
  std::unique_ptr<OpenAiCall> call(new OpenAiCall());
  call->state_ = state;
  call->events_ = std::make_shared<Events>(choices);
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
  Cancel();
  if (call_token_.has_value()) state_->EndCall(*call_token_);
}

int OpenAiCall::choices() const { return static_cast<int>(choices_.size()); }

absl::Status OpenAiCall::Submit(std::vector<GenerateRequest> requests,
                                const std::vector<std::string>& stop,
                                const TextTokenizer* tokenizer, RequestMetrics* metrics) {
  tokenizer_ = tokenizer;
  const int n = static_cast<int>(requests.size());
  if (n != static_cast<int>(events_->engine.size())) {
    return absl::InternalError("OpenAiCall::Submit: not one request per admitted choice");
  }
  choices_.reserve(n);
  for (int i = 0; i < n; ++i) {
    Choice& c = choices_.emplace_back(stop);
    c.prompt_tokens = static_cast<int>(requests[i].prompt.size());
    std::shared_ptr<Events> events = events_;
    absl::StatusOr<int64_t> id =
        events_->engine[i].Submit(engine_, metrics, std::move(requests[i]),
                                  [events, i](const TokenEvent& ev) { events->Push(i, ev); });
    if (!id.ok()) {
      c.finished = true;
      Cancel();  // the choices before it
      return InApiTerms(id.status(), n > 1 ? i : -1);
    }
    ++unfinished_;
  }
  return absl::OkStatus();
}

void OpenAiCall::Cancel() {
  for (size_t i = 0; i < choices_.size(); ++i) {
    if (!choices_[i].finished) events_->engine[i].Cancel();
  }
}

std::optional<OpenAiCall::Piece> OpenAiCall::Next(absl::Duration timeout) {
  const absl::Time until = absl::Now() + timeout;
  std::deque<TokenEvent> got;
  int index = 0;
  bool aborted = false;
  {
    std::unique_lock<std::mutex> lock(events_->mu);
    do {
      got.clear();
      if (!events_->cv.wait_for(lock, absl::ToChronoMicroseconds(until - absl::Now()),
                                [&] { return !events_->queue.empty(); })) {
        return std::nullopt;
      }
      // The first queued choice's events, in order; the other choices' stay queued.
      index = events_->queue.front().first;
      for (auto it = events_->queue.begin(); it != events_->queue.end();) {
        if (it->first != index) {
          ++it;
          continue;
        }
        got.push_back(std::move(it->second));
        it = events_->queue.erase(it);
      }
      // A choice ended at a stop string: what the engine sends after it is dropped.
    } while (choices_[index].finished);
    aborted = events_->aborted;
  }
  Choice& c = choices_[index];
  Piece p;
  p.index = index;
  std::string bytes;
  for (TokenEvent& ev : got) {
    c.completion_tokens += static_cast<int>(ev.token_ids.size());
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
  p.out.text = c.stop.Push(c.text.Push(bytes));
  if (p.final) {
    p.out.text += c.stop.Push(c.text.Flush());
    p.out.text += c.stop.Flush();
  }
  if (c.stop.stopped() && !p.final) {
    // The text reached a stop string: the choice ends here, whatever the engine does next,
    // and ends as stopped (its final event says kStop: metrics count it finished, not aborted).
    events_->engine[index].Cancel(FinishReason::kStop);
    p.final = true;
    p.usage.prompt_tokens = c.prompt_tokens;
    p.usage.completion_tokens = c.completion_tokens;
  }
  if (c.stop.stopped() && p.error.ok()) p.finish_reason = "stop";
  if (p.final) {
    c.finished = true;
    --unfinished_;
  }
  return p;
}

}  // namespace saturn
