// The server's text tokenizer: what prompt_text is encoded with and streamed tokens are
// decoded with. The built-in presets use the byte tokenizer (engine/tokenizer/byte_tokenizer.h); a
// checkpoint directory holding tokenizer.json uses it (engine/tokenizer/tokenizer_hf.h: its BOS/EOS
// rule is transformers'); a checkpoint without one has none (token ids only); a .gguf file uses
// the tokenizer in its metadata (engine/tokenizer/tokenizer_gguf.h: its BOS/EOS rule is
// llama.cpp's), and none where the file holds no tokenizer.ggml.model. A tokenizer the reader
// refuses stops the server at start with the reader's error, as vLLM does, unless
// --skip_tokenizer_init asks for token ids only. Immutable once made: thread-safe.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace saturn {

class TextTokenizer {
 public:
  virtual ~TextTokenizer() = default;
  // The prompt's ids, special tokens included.
  virtual absl::StatusOr<std::vector<int>> Encode(std::string_view text) const = 0;
  // The ids of text a chat template rendered: special tokens written in it become their ids and
  // none is added around it (transformers' add_special_tokens=False, as apply_chat_template
  // encodes: the template writes its own BOS).
  virtual absl::StatusOr<std::vector<int>> EncodeRendered(std::string_view text) const = 0;
  // The bytes one generated token adds to the streamed text ("" for special tokens and ids
  // without text). Concatenated and assembled into whole UTF-8 characters by Utf8Stream.
  virtual std::string TokenBytes(int id) const = 0;
  // Longest prompt_text accepted for a context of `max_model_len` tokens (it bounds the work
  // of encoding; the token count is checked against the context after).
  virtual int max_prompt_text_bytes(int max_model_len) const = 0;
  // Every id Encode can produce is below this (compared with the model's vocab_size at start).
  virtual int id_limit() const = 0;
  // "byte", "tokenizer.json" or "gguf" (GetServerInfo's model.tokenizer).
  virtual std::string kind() const = 0;
  // One line for the start-up log.
  virtual std::string Describe() const = 0;
};

// The tokenizer for `model` (a preset name, a checkpoint directory or a .gguf file): null when
// the model has none or `skip` (--skip_tokenizer_init) is set; an error when its tokenizer.json
// or GGUF tokenizer cannot be used (the error names the file and the feature or key).
absl::StatusOr<std::unique_ptr<TextTokenizer>> LoadTextTokenizer(const std::string& model,
                                                                 bool skip);

}  // namespace saturn
