// A generation request as the engine sees it, its validation, and the events it produces.
// Plain data; the scheduler (engine/scheduler.h) keeps the mutable per-request state.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace saturn {

struct SamplingParams {
  float temperature = 0.0f;  // 0: greedy
  int top_k = 0;             // 0: off
  float top_p = 1.0f;        // 1: off; must be in (0, 1]
  int64_t seed = 0;
  int max_tokens = 16;
  std::vector<int> stop_token_ids;
  bool ignore_eos = false;
};

struct GenerateRequest {
  std::vector<int> prompt;  // token ids
  SamplingParams sampling;
  std::string client_request_id;  // optional, echoed in logs and events
};

enum class FinishReason { kNone, kLength, kStop, kCancelled, kError };
const char* FinishReasonName(FinishReason r);

struct Usage {
  int prompt_tokens = 0;
  int completion_tokens = 0;
  int num_preemptions = 0;
};

// Server-side timestamps are steady-clock microseconds (same clock as step records).
struct RequestTimings {
  double arrival_us = 0;
  double first_scheduled_us = 0;
  double first_token_us = 0;
  double finished_us = 0;
};

struct TokenEvent {
  std::vector<int> token_ids;  // new tokens (empty on the final event of a cancelled request)
  double time_us = 0;          // when the step that produced them finished
  bool final = false;
  FinishReason finish_reason = FinishReason::kNone;
  std::string error;       // set when finish_reason == kError
  Usage usage;             // filled on the final event
  RequestTimings timings;  // filled on the final event
};

// Called on the engine thread, in order, once per event; the final event is the last call.
// Must not block (hand the event to another thread if work is needed).
using EventCallback = std::function<void(const TokenEvent&)>;

struct ModelLimits {
  int vocab_size = 0;
  int max_model_len = 0;
};

// Checks a request against the model. The error names the field and the limit.
absl::Status ValidateRequest(const GenerateRequest& req, const ModelLimits& limits);

}  // namespace saturn
