// The one request intake both fronts call (the gRPC Generate handler, the OpenAI HTTP API):
// the server-level checks of a saturn.v1.GenerateRequest (text vs token ids, sizes, enum values)
// and its conversion to the engine's request, with prompt_text encoded by the model's text
// tokenizer and a fresh seed where the request sets none; then the request's way into the
// engine and out of it (EngineCall: submit, events, cancel). The engine checks the rest once, in
// Engine::Submit (ValidateRequest: the prompt's ids, the sampling fields, stop_token_ids, the
// context length); nothing here repeats it. The limits are computed once, when the model has
// loaded. Thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>

#include "absl/status/statusor.h"
#include "engine/engine.h"
#include "engine/tokenizer/text_tokenizer.h"
#include "saturn/v1/saturn.pb.h"
#include "server/diag/request_metrics.h"
#include "server/server_config.h"

namespace saturn {

// What the server needs to know about the model to check a request.
struct PromptLimits {
  int max_model_len = 0;
  int vocab_size = 0;
  const TextTokenizer* tokenizer = nullptr;  // null: token ids only
  int max_client_request_id_bytes = 256;
  int max_stop_token_ids = 256;
  bool has_text_tokenizer() const { return tokenizer != nullptr; }
  // Longest prompt_text (0 without a tokenizer).
  int max_prompt_text_bytes() const {
    return tokenizer != nullptr ? tokenizer->max_prompt_text_bytes(max_model_len) : 0;
  }
};

struct ConvertedRequest {
  GenerateRequest request;
  bool want_text = false;  // deltas carry decoded text
};

// Checks the server-level fields and builds the engine request (text prompts encoded by the
// model's text tokenizer, special tokens included). `default_seed` is used when the request sets
// none. INVALID_ARGUMENT names the field and the limit.
absl::StatusOr<ConvertedRequest> ToEngineRequest(const v1::GenerateRequest& req,
                                                 const PromptLimits& limits, int64_t default_seed);

class RequestIntake {
 public:
  // `model` is the loaded engine's (EngineInfo::limits); `tokenizer` (null: token ids only)
  // outlives the intake.
  RequestIntake(const ServerConfig& config, const ModelLimits& model,
                const TextTokenizer* tokenizer);
  RequestIntake(const RequestIntake&) = delete;
  RequestIntake& operator=(const RequestIntake&) = delete;

  const PromptLimits& limits() const { return limits_; }
  const TextTokenizer* tokenizer() const { return limits_.tokenizer; }
  // ToEngineRequest with these limits and the next default seed.
  absl::StatusOr<ConvertedRequest> Convert(const v1::GenerateRequest& req);
  // A fresh default seed: non-negative, so a client can pass the reported seed back unchanged.
  int64_t NextSeed();

 private:
  PromptLimits limits_;
  std::atomic<uint64_t> seed_counter_;
};

// A request's engine side, shared by the fronts that stream its tokens (the gRPC Generate
// reactor, the OpenAI HTTP call): Engine::Submit with the front's event handler behind the
// request metrics, and a Cancel that any thread may call at any time. A cancel that comes
// before Submit has returned the request's id is issued as soon as it has.
//   front:   Submit(engine, metrics, request, on_event) -> id
//   engine event thread: metrics->ObserveEvent -> on_event ... final event
//   any thread: Cancel(reason) -> Engine::Cancel now, or right after Submit
// Thread-safe. The owner keeps the EngineCall alive for on_event (on_event captures it).
class EngineCall {
 public:
  using OnEvent = std::function<void(const TokenEvent&)>;

  EngineCall() = default;
  EngineCall(const EngineCall&) = delete;
  EngineCall& operator=(const EngineCall&) = delete;

  // Engine::Submit, once. `metrics` (optional) sees every event before `on_event`, which runs
  // on the engine's event thread and must not block beyond a mutex.
  absl::StatusOr<int64_t> Submit(Engine* engine, RequestMetrics* metrics, GenerateRequest request,
                                 OnEvent on_event);
  // Ends the request in the engine (its final event follows); before Submit returned, as soon
  // as it has. The first reason given is the one used.
  void Cancel(FinishReason reason = FinishReason::kCancelled);
  // The engine's id for the request; 0 until Submit returned.
  int64_t request_id() const;

 private:
  RequestMetrics* metrics_ = nullptr;  // set before Submit, then read-only
  double last_token_us_ = 0;           // the engine's event thread only

  mutable std::mutex mu_;
  Engine* engine_ = nullptr;  // set once Submit returned an id
  int64_t id_ = 0;
  std::optional<FinishReason> cancel_;  // asked for before the id was known
};

}  // namespace saturn
