// Request validation: every bad field becomes an InvalidArgument that names the field and
// the limit it broke, so a client can fix its request without reading server logs.
#include "engine/request.h"

#include <array>
#include <cmath>
#include <cstddef>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "kernels/base/enum_table.h"
#include "kernels/base/status_macros.h"

namespace saturn {

const char* FinishReasonName(FinishReason r) {
  static constexpr std::array kNames{"none", "length", "stop", "cancelled", "error"};
  return EnumLookup(kNames, r, "unknown");
}

absl::Status CheckTokenIds(absl::Span<const int> ids, int vocab_size, std::string_view field) {
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= vocab_size) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s[%d]: token id %d is outside the vocabulary [0, %d)", field, i, ids[i], vocab_size));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateRequest(const GenerateRequest& req, const ModelLimits& limits) {
  const int vocab = limits.vocab_size;
  if (req.prompt.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(req.prompt_field, ": must contain at least one token"));
  }
  RETURN_IF_ERROR(CheckTokenIds(req.prompt, vocab, req.prompt_field));
  const SamplingParams& s = req.sampling;
  if (s.max_tokens < 1) {
    return absl::InvalidArgumentError(
        absl::StrFormat("max_tokens: must be at least 1, got %d", s.max_tokens));
  }
  // 64-bit sum: a huge max_tokens must not wrap around and slip under the limit.
  const int64_t total = static_cast<int64_t>(req.prompt.size()) + s.max_tokens;
  if (total > limits.max_model_len) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "max_tokens: prompt length %d + max_tokens %d exceeds the model context of %d tokens",
        req.prompt.size(), s.max_tokens, limits.max_model_len));
  }
  // Written so that NaN fails every comparison and lands in the error branch.
  if (!(s.top_p > 0.0f && s.top_p <= 1.0f)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("top_p: must be in (0, 1], got %.9g", s.top_p));
  }
  if (!(s.temperature >= 0.0f && std::isfinite(s.temperature))) {
    return absl::InvalidArgumentError(
        absl::StrFormat("temperature: must be a finite value >= 0, got %.9g", s.temperature));
  }
  if (s.top_k < 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("top_k: must be >= 0 (0 disables it), got %d", s.top_k));
  }
  RETURN_IF_ERROR(CheckTokenIds(s.stop_token_ids, vocab, "stop_token_ids"));
  if (s.logprobs < -1 || s.logprobs > kMaxLogprobs) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "logprobs: must be in [0, %d] (or unset), got %d", kMaxLogprobs, s.logprobs));
  }
  if (s.prompt_logprobs < -1 || s.prompt_logprobs > kMaxLogprobs) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "prompt_logprobs: must be in [0, %d] (or unset), got %d", kMaxLogprobs, s.prompt_logprobs));
  }
  return absl::OkStatus();
}

SamplingParams EffectiveSampling(SamplingParams s) {
  if (s.temperature < kGreedyBelowTemperature) s.temperature = 0.0f;
  return s;
}

}  // namespace saturn
