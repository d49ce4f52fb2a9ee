// Fuzz target: the bytes of a saturn.v1.GenerateRequest as the server receives them, through
// the whole server-side check (raw parse, ToEngineRequest, the engine's ValidateRequest).
// Whatever the bytes, the result is a value or INVALID_ARGUMENT, never a crash; an accepted
// request fits the limits.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string_view>

#include "server/proto_convert.h"
#include "server/raw_message.h"
#include "server/text_tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  saturn::v1::GenerateRequest req;
  const absl::Status parsed =
      saturn::ParseRequest(std::string_view(reinterpret_cast<const char*>(data), size), &req);
  if (!parsed.ok()) {
    if (parsed.code() != absl::StatusCode::kInvalidArgument) std::abort();
    return 0;
  }
  const saturn::ModelLimits model{4096, 512};
  saturn::PromptLimits limits;
  limits.max_model_len = model.max_model_len;
  limits.vocab_size = model.vocab_size;
  // The built-in byte tokenizer (what a preset has) on even sizes, token ids only on odd ones.
  static const std::unique_ptr<saturn::TextTokenizer> byte_tokenizer =
      *saturn::LoadTextTokenizer("tiny", /*skip=*/false);
  limits.tokenizer = (size & 1) == 0 ? byte_tokenizer.get() : nullptr;
  absl::StatusOr<saturn::ConvertedRequest> converted = saturn::ToEngineRequest(req, limits, 7);
  if (!converted.ok()) {
    if (converted.status().code() != absl::StatusCode::kInvalidArgument) std::abort();
    return 0;
  }
  const absl::Status valid = saturn::ValidateRequest(converted->request, model);
  if (valid.ok()) {
    const auto& r = converted->request;
    if (r.prompt.empty() ||
        static_cast<int64_t>(r.prompt.size()) + r.sampling.max_tokens > model.max_model_len) {
      std::abort();
    }
    for (int t : r.prompt) {
      if (t < 0 || t >= model.vocab_size) std::abort();
    }
  } else if (valid.code() != absl::StatusCode::kInvalidArgument) {
    std::abort();
  }
  return 0;
}
