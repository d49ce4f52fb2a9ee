// Conversions between the saturn.v1 messages and the engine's plain structs, with the
// server-level request checks (text vs token ids, sizes, enum values, prompt_token_ids in the
// vocabulary). The engine checks the rest once, in Engine::Submit (ValidateRequest: the
// sampling fields, stop_token_ids, the context length); nothing here repeats it.
// Pure functions, thread-safe.
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"
#include "engine/engine.h"
#include "saturn/v1/saturn.pb.h"
#include "server/server_config.h"
#include "server/text_tokenizer.h"

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

v1::FinishReason ToProto(FinishReason reason);
void ToProto(const EngineOptions& options, v1::EngineOptions* out);
void ToProto(const Usage& usage, v1::Usage* out);
void ToProto(const RequestTimings& timings, v1::RequestTimings* out);
void ToProto(const PositionLogprobs& logprobs, v1::PositionLogprobs* out);

// Overlays the fields set in `req` on `current`.
EngineOptions MergeOptions(const EngineOptions& current, const v1::UpdateEngineOptionsRequest& req);

// Everything GetServerInfo reports about a running engine.
void FillServerInfo(const Engine& engine, const PromptLimits& limits,
                    const std::string& listen_address, v1::ServerInfo* out);

}  // namespace saturn
