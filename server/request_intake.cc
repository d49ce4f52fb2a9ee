// The request intake: server-level checks, the engine request, default seeds, and the
// request's engine side (EngineCall: Submit and Cancel, ordered by one mutex).
#include "server/request_intake.h"

#include <random>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "kernels/base/split_mix64.h"

namespace saturn {

absl::StatusOr<ConvertedRequest> ToEngineRequest(const v1::GenerateRequest& req,
                                                 const PromptLimits& limits, int64_t default_seed) {
  const bool has_text = !req.prompt_text().empty();
  const bool has_ids = req.prompt_token_ids_size() > 0;
  if (has_text == has_ids) {
    return absl::InvalidArgumentError(
        absl::StrCat("prompt_text, prompt_token_ids: exactly one must be set (got ",
                     has_text ? "both" : "neither", "); an empty prompt is not allowed"));
  }
  if (!v1::OutputFormat_IsValid(req.output_format())) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "output_format: unknown value %d (valid: 0 UNSPECIFIED, 1 TOKENS_AND_TEXT, 2 TOKENS)",
        req.output_format()));
  }
  if (req.output_format() == v1::OUTPUT_FORMAT_TOKENS_AND_TEXT && !limits.has_text_tokenizer()) {
    return absl::InvalidArgumentError(
        "output_format: TOKENS_AND_TEXT needs a text tokenizer, which the built-in presets, "
        "checkpoints with tokenizer.json and GGUF files with tokenizer metadata have; use "
        "OUTPUT_FORMAT_TOKENS");
  }
  if (static_cast<int>(req.client_request_id().size()) > limits.max_client_request_id_bytes) {
    return absl::InvalidArgumentError(
        absl::StrFormat("client_request_id: %d bytes exceeds the limit of %d bytes",
                        req.client_request_id().size(), limits.max_client_request_id_bytes));
  }
  if (req.stop_token_ids_size() > limits.max_stop_token_ids) {
    return absl::InvalidArgumentError(
        absl::StrFormat("stop_token_ids: %d ids exceeds the limit of %d ids",
                        req.stop_token_ids_size(), limits.max_stop_token_ids));
  }

  ConvertedRequest out;
  GenerateRequest& r = out.request;
  if (has_text) {
    if (!limits.has_text_tokenizer()) {
      return absl::InvalidArgumentError(
          "prompt_text: this model has no text tokenizer (the built-in presets, checkpoints "
          "with tokenizer.json and GGUF files with tokenizer metadata have one); send "
          "prompt_token_ids");
    }
    // Checked before encoding: the size bounds the work done for a hostile request.
    if (static_cast<int64_t>(req.prompt_text().size()) > limits.max_prompt_text_bytes()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "prompt_text: %d bytes exceeds the limit of %d bytes for max_model_len %d (%s "
          "tokenizer; the prompt and at least one generated token must fit)",
          req.prompt_text().size(), limits.max_prompt_text_bytes(), limits.max_model_len,
          limits.tokenizer->kind()));
    }
    absl::StatusOr<std::vector<int>> ids = limits.tokenizer->Encode(req.prompt_text());
    if (!ids.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("prompt_text: ", ids.status().message()));
    }
    r.prompt = std::move(*ids);
    r.prompt_field = "prompt_text";
    // A tokenizer with more ids than the model's embedding (the start-up log warns of it): said
    // in the tokenizer's terms, before the engine would name the id alone.
    for (size_t i = 0; i < r.prompt.size(); ++i) {
      if (r.prompt[i] >= limits.vocab_size) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "prompt_text: token %d encodes to id %d, past the model's vocab_size %d (the "
            "tokenizer has more ids than the model)",
            i, r.prompt[i], limits.vocab_size));
      }
    }
  } else {
    if (req.prompt_token_ids_size() > limits.max_model_len) {
      return absl::InvalidArgumentError(
          absl::StrFormat("prompt_token_ids: %d ids exceeds the limit of max_model_len %d",
                          req.prompt_token_ids_size(), limits.max_model_len));
    }
    r.prompt.assign(req.prompt_token_ids().begin(), req.prompt_token_ids().end());
    r.prompt_field = "prompt_token_ids";  // the engine checks the ids, naming this field
  }

  SamplingParams& s = r.sampling;
  if (req.has_max_tokens()) s.max_tokens = req.max_tokens();
  if (req.has_temperature()) s.temperature = req.temperature();
  if (req.has_top_k()) s.top_k = req.top_k();
  if (req.has_top_p()) s.top_p = req.top_p();
  s.seed = req.has_seed() ? req.seed() : default_seed;
  s.stop_token_ids.assign(req.stop_token_ids().begin(), req.stop_token_ids().end());
  s.ignore_eos = req.ignore_eos();
  // Unset is -1 in the engine; an explicit negative value is an error, not "unset".
  if ((req.has_logprobs() && req.logprobs() < 0) ||
      (req.has_prompt_logprobs() && req.prompt_logprobs() < 0)) {
    const bool lp = req.has_logprobs() && req.logprobs() < 0;
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: must be in [0, %d] (or unset), got %d", lp ? "logprobs" : "prompt_logprobs",
        kMaxLogprobs, lp ? req.logprobs() : req.prompt_logprobs()));
  }
  if (req.has_logprobs()) s.logprobs = req.logprobs();
  if (req.has_prompt_logprobs()) s.prompt_logprobs = req.prompt_logprobs();
  r.client_request_id = req.client_request_id();
  out.want_text = limits.has_text_tokenizer() && req.output_format() != v1::OUTPUT_FORMAT_TOKENS;
  return out;
}

RequestIntake::RequestIntake(const ServerConfig& config, const ModelLimits& model,
                             const TextTokenizer* tokenizer)
    : seed_counter_((static_cast<uint64_t>(std::random_device{}()) << 32) ^
                    std::random_device{}()) {
  limits_.max_model_len = model.max_model_len;
  limits_.vocab_size = model.vocab_size;
  limits_.tokenizer = tokenizer;
  limits_.max_client_request_id_bytes = config.max_client_request_id_bytes;
  limits_.max_stop_token_ids = config.max_stop_token_ids;
}

absl::StatusOr<ConvertedRequest> RequestIntake::Convert(const v1::GenerateRequest& req) {
  return ToEngineRequest(req, limits_, NextSeed());
}

int64_t RequestIntake::NextSeed() {
  return static_cast<int64_t>(SplitMix64(seed_counter_.fetch_add(1)) >> 1);
}

absl::StatusOr<int64_t> EngineCall::Submit(Engine* engine, RequestMetrics* metrics,
                                           GenerateRequest request, OnEvent on_event) {
  metrics_ = metrics;
  absl::StatusOr<int64_t> id = engine->Submit(
      std::move(request), [this, on_event = std::move(on_event)](const TokenEvent& ev) {
        if (metrics_ != nullptr) metrics_->ObserveEvent(ev, &last_token_us_);
        on_event(ev);
      });
  if (!id.ok()) return id;
  std::optional<FinishReason> cancel;
  {
    std::lock_guard<std::mutex> lock(mu_);
    engine_ = engine;
    id_ = *id;
    cancel = cancel_;
  }
  if (cancel.has_value()) engine->Cancel(*id, *cancel);
  return id;
}

void EngineCall::Cancel(FinishReason reason) {
  Engine* engine = nullptr;
  int64_t id = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (id_ == 0) {
      if (!cancel_.has_value()) cancel_ = reason;
      return;
    }
    engine = engine_;
    id = id_;
  }
  engine->Cancel(id, reason);
}

int64_t EngineCall::request_id() const {
  std::lock_guard<std::mutex> lock(mu_);
  return id_;
}

}  // namespace saturn
