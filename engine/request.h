// A generation request as the engine sees it, its validation, and the events it produces.
// Plain data; the scheduler (engine/scheduler.h) keeps the mutable per-request state.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"

namespace saturn {

struct SamplingParams {
  float temperature = 0.0f;  // 0: greedy
  int top_k = 0;             // 0: off
  float top_p = 1.0f;        // 1: off; must be in (0, 1]
  int64_t seed = 0;
  int max_tokens = 16;
  std::vector<int> stop_token_ids;
  bool ignore_eos = false;
  // Logprobs of the model's raw distribution (log_softmax of the logits, before temperature,
  // top-k and top-p, as vLLM's default): -1 asks for none; N in [0, kMaxLogprobs] returns
  // each generated (or prompt) token's own logprob plus the N most likely alternatives.
  int logprobs = -1;
  int prompt_logprobs = -1;
};

constexpr int kMaxLogprobs = 20;  // vLLM's default max_logprobs, the OpenAI API's top_logprobs

// Temperatures below this sample greedily, as vLLM's _SAMPLING_EPS does: logits / 1e-38
// overflow f32 to inf, and the softmax of infs is NaN. At 1e-5 the softmax is already one-hot
// for any logit gap above about 1e-3.
constexpr float kGreedyBelowTemperature = 1e-5f;

// One token's log-probability under the raw distribution; rank 1 is the most likely (1 +
// the number of tokens with a strictly larger logprob, as vLLM counts it).
struct TokenLogprob {
  int token_id = 0;
  float logprob = 0.f;
  int rank = 0;
};

// The logprobs of one position: the token that is there (sampled or from the prompt) and the
// top-N alternatives, most likely first (lower token id first on ties).
struct PositionLogprobs {
  TokenLogprob token;
  std::vector<TokenLogprob> top;
};

struct GenerateRequest {
  std::vector<int> prompt;  // token ids
  // What the caller's API calls the prompt, named in refusals of its ids ("prompt[3]: ...").
  const char* prompt_field = "prompt";
  SamplingParams sampling;
  std::string client_request_id;  // optional, echoed in logs and events
};

enum class FinishReason { kNone, kLength, kStop, kCancelled, kError, kCount };
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
  // One entry per token_ids entry when the request asked for logprobs, else empty.
  std::vector<PositionLogprobs> logprobs;
  // On the request's first event with tokens, when it asked for prompt_logprobs: entry i is
  // prompt token i + 1 (the first prompt token has no logprob), so prompt length - 1 entries.
  std::vector<PositionLogprobs> prompt_logprobs;
  double time_us = 0;  // when the step that produced them finished
  bool final = false;
  FinishReason finish_reason = FinishReason::kNone;
  std::string error;       // set when finish_reason == kError
  Usage usage;             // filled on the final event
  RequestTimings timings;  // filled on the final event
};

// Called on an event thread (engine/event_delivery.h; the engine thread with --event_thread
// off), in order, once per event; the final event is the last call. Must not block: while it runs,
// no other request's events go out, and a delivery a few steps behind holds the engine up.
using EventCallback = std::function<void(const TokenEvent&)>;

struct ModelLimits {
  int vocab_size = 0;
  int max_model_len = 0;
};

// Checks a request against the model. The error names the field and the limit.
absl::Status ValidateRequest(const GenerateRequest& req, const ModelLimits& limits);
// What the engine runs for valid sampling params: a temperature under kGreedyBelowTemperature
// becomes 0 (greedy).
SamplingParams EffectiveSampling(SamplingParams s);

// Checks that every id lies in [0, vocab_size); the error names `field`[i], the id and the range.
absl::Status CheckTokenIds(absl::Span<const int> ids, int vocab_size, std::string_view field);

}  // namespace saturn
