// One OpenAI API request's life in the engine, for the HTTP worker thread that serves it. The
// engine thread only queues its events (never blocking beyond a mutex); the worker takes them
// as pieces of text (whole UTF-8 characters, stop strings applied), with the tokens and
// logprobs behind them, merging whatever queued up since its last look (one chunk per look,
// not per token, when it falls behind).
//
//   Admit (ServingState registration; UNAVAILABLE when loading or draining)
//     -> Submit (Engine::Submit) -> Next ... final piece -> destructor (Cancel if unfinished,
//        registration ended)
// A stop string ends the request at once (Engine::Cancel); a shutdown past its grace period
// ends it with UNAVAILABLE; a client gone is the owner's Cancel.
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

class StopStringFilter;
class Utf8Stream;

class OpenAiCall {
 public:
  struct Piece {
    CompletionPiece out;
    bool final = false;
    std::string finish_reason;  // the final piece of a finished request: "length" or "stop"
    absl::Status error;         // the final piece of a failed or aborted request
    Usage usage;                // the final piece
  };

  // Registers a call with `state`; UNAVAILABLE while the model loads or the server drains.
  static absl::StatusOr<std::unique_ptr<OpenAiCall>> Admit(ServingState* state);
  ~OpenAiCall();
  OpenAiCall(const OpenAiCall&) = delete;
  OpenAiCall& operator=(const OpenAiCall&) = delete;

  // The engine, valid for this call's life.
  Engine* engine() const { return engine_; }
  // Submits `request`; Engine::Submit's errors. `tokenizer` null: no text.
  absl::Status Submit(GenerateRequest request, std::vector<std::string> stop,
                      const TextTokenizer* tokenizer, RequestMetrics* metrics);
  // The next piece, waiting up to `timeout`; nullopt when nothing came in time. Not called
  // again after the final piece.
  std::optional<Piece> Next(absl::Duration timeout);
  // The client is gone: cancel the request in the engine (its KV blocks are returned).
  void Cancel();

 private:
  struct Events;  // what the engine's event thread and the abort hook share with the worker
  OpenAiCall() = default;

  ServingState* state_ = nullptr;
  Engine* engine_ = nullptr;
  std::optional<int64_t> call_token_;  // ServingState registration
  std::shared_ptr<Events> events_;
  int prompt_tokens_ = 0;
  int completion_tokens_ = 0;
  const TextTokenizer* tokenizer_ = nullptr;
  std::unique_ptr<Utf8Stream> text_;
  std::unique_ptr<StopStringFilter> stop_;
  bool finished_ = false;
};

}  // namespace saturn
