// One OpenAI API request's life in the engine, for the HTTP worker thread that serves it: one
// engine request per prompt, each the choice of that index. The engine thread only queues their
// events (never blocking beyond a mutex); the worker takes them as pieces of one choice's text
// (whole UTF-8 characters, stop strings applied), with the tokens and logprobs behind them,
// merging whatever of that choice queued up since its last look (one chunk per look, not per
// token, when it falls behind).
//
//   Admit (ServingState registration; UNAVAILABLE when loading or draining)
//     -> Submit (Engine::Submit per prompt) -> Next ... each choice's final piece
//     -> destructor (Cancel of the unfinished choices, registration ended)
// A stop string ends its choice at once (Engine::Cancel); a shutdown past its grace period
// ends them all with UNAVAILABLE; a client gone, or a choice that failed, is the owner's Cancel.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "engine/engine.h"
#include "engine/tokenizer/text_tokenizer.h"
#include "server/diag/request_metrics.h"
#include "server/http/openai_protocol.h"
#include "server/serving_state.h"

namespace saturn {

class OpenAiCall {
 public:
  struct Piece {
    int index = 0;  // the choice: the prompt's index in the request
    CompletionPiece out;
    bool final = false;         // the choice's last piece
    std::string finish_reason;  // the final piece of a finished choice: "length" or "stop"
    absl::Status error;         // the final piece of a failed or aborted choice
    Usage usage;                // the final piece
  };

  // Registers a call of `choices` engine requests with `state`; UNAVAILABLE while the model
  // loads or the server drains.
  static absl::StatusOr<std::unique_ptr<OpenAiCall>> Admit(ServingState* state, int choices = 1);
  ~OpenAiCall();
  OpenAiCall(const OpenAiCall&) = delete;
  OpenAiCall& operator=(const OpenAiCall&) = delete;

  // The engine, valid for this call's life.
  Engine* engine() const { return engine_; }
  // Submits requests[i] as choice i (one per choice Admit was given), in order; `tokenizer`
  // null: no text. On an error the choices already submitted are cancelled, and the error is in
  // the API's terms, naming the prompt (InApiTerms).
  absl::Status Submit(std::vector<GenerateRequest> requests, const std::vector<std::string>& stop,
                      const TextTokenizer* tokenizer, RequestMetrics* metrics);
  // The next piece of whichever choice's events came first, waiting up to `timeout`; nullopt
  // when nothing came in time. Not called once done().
  std::optional<Piece> Next(absl::Duration timeout);
  // Whether every choice's final piece was taken.
  bool done() const { return unfinished_ == 0; }
  int choices() const;
  // The client is gone, or a choice failed: cancel the unfinished choices in the engine (their
  // KV blocks are returned).
  void Cancel();

 private:
  struct Events;  // what the engine's event thread and the abort hook share with the worker
  struct Choice;  // one choice's text assembly (the worker's)
  OpenAiCall() = default;

  ServingState* state_ = nullptr;
  Engine* engine_ = nullptr;
  std::optional<int64_t> call_token_;  // ServingState registration
  std::shared_ptr<Events> events_;
  const TextTokenizer* tokenizer_ = nullptr;
  std::vector<Choice> choices_;
  int unfinished_ = 0;
};

}  // namespace saturn
