// What the request fuzz targets (generate_request, openai_completion) share: the limits they
// convert against, and the check that an accepted request fits them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>

#include "engine/request.h"
#include "engine/tokenizer/text_tokenizer.h"
#include "server/request_intake.h"

namespace saturn::fuzz {

inline constexpr ModelLimits kModel{4096, 512};

// The built-in byte tokenizer (what a preset has) on even input sizes, token ids only on odd.
inline PromptLimits LimitsFor(size_t input_size) {
  static const std::unique_ptr<TextTokenizer> byte_tokenizer =
      *LoadTextTokenizer("tiny", /*skip=*/false);
  PromptLimits limits;
  limits.max_model_len = kModel.max_model_len;
  limits.vocab_size = kModel.vocab_size;
  limits.tokenizer = (input_size & 1) == 0 ? byte_tokenizer.get() : nullptr;
  return limits;
}

// A request ValidateRequest accepted: a prompt, within the context, every id in the vocabulary.
inline void CheckAccepted(const GenerateRequest& r) {
  if (r.prompt.empty() ||
      static_cast<int64_t>(r.prompt.size()) + r.sampling.max_tokens > kModel.max_model_len) {
    std::abort();
  }
  for (int t : r.prompt) {
    if (t < 0 || t >= kModel.vocab_size) std::abort();
  }
}

}  // namespace saturn::fuzz
