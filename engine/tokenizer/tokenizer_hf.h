// A Hugging Face checkpoint's text tokenizer as transformers applies it to a prompt:
// tokenizer.json (the byte-level BPE reader, engine/tokenizer/tokenizer_bpe.h) plus the special
// tokens that encode(text) adds around the text (transformers' add_special_tokens=True). The rule,
// transformers' own:
//   1. tokenizer_config.json sets add_bos_token or add_eos_token: the Llama-family fast
//      tokenizers (LlamaTokenizerFast, GemmaTokenizerFast, ...) rebuild the post-processor
//      from these, so BOS (its bos_token) when add_bos_token is true, EOS (eos_token) when
//      add_eos_token is true, nothing else;
//   2. otherwise tokenizer.json's post_processor: TemplateProcessing's `single` template
//      (its special tokens before and after $A; Llama 3), ByteLevel adds nothing (GPT-2),
//      Sequence applies each; any other post-processor is refused, naming it;
//   3. neither: no special tokens.
// Immutable after Load: thread-safe.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/tokenizer/tokenizer_bpe.h"

namespace saturn {

class HfTokenizer {
 public:
  // Reads `dir`/tokenizer.json and, when present, `dir`/tokenizer_config.json. Errors name
  // the file and the field (UNIMPLEMENTED for features Saturn does not implement).
  static absl::StatusOr<std::unique_ptr<HfTokenizer>> Load(const std::string& dir);

  // The prompt's ids: prefix, the text's ids, suffix.
  absl::StatusOr<std::vector<int>> EncodePrompt(std::string_view text) const;
  const BpeTokenizer& bpe() const { return *bpe_; }
  const std::vector<int>& prefix() const { return prefix_; }
  const std::vector<int>& suffix() const { return suffix_; }
  // Which rule chose the special tokens, for logs: "tokenizer_config.json add_bos_token",
  // "tokenizer.json post_processor" or "none".
  const std::string& special_tokens_source() const { return source_; }

 private:
  std::unique_ptr<BpeTokenizer> bpe_;
  std::vector<int> prefix_;
  std::vector<int> suffix_;
  std::string source_;
};

}  // namespace saturn
