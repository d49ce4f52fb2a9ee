// A GGUF file's own text tokenizer, read from its metadata as llama.cpp reads it. Saturn reads
// the byte-level BPE kind (tokenizer.ggml.model "gpt2", as Llama 3 files carry it):
//   tokenizer.ggml.tokens      the vocabulary by id: normal tokens in GPT-2's byte-mapped form
//                              (tokenizer.json's vocab keys), the others as their plain text;
//   tokenizer.ggml.token_type  per id: 1 normal, 2 unknown, 3 control, 4 user-defined,
//                              5 unused (a placeholder: no text), 6 byte (refused:
//                              SentencePiece's); absent means all normal, as llama.cpp reads it;
//   tokenizer.ggml.merges      "a b" by rank;
//   tokenizer.ggml.pre         which pre-tokenizer split: "llama-bpe" (also "llama3", "llama-v3":
//                              Llama 3's regex split, merges ignored for whole-vocabulary pieces)
//                              and "gpt-2" (GPT-2's ByteLevel regex). Each is the split Hugging
//                              Face's tokenizer.json gives that model; any other name, llama.cpp's
//                              own fallback "default" included (it matches no Hugging Face
//                              pre-tokenizer), is refused;
//   tokenizer.ggml.add_bos_token / add_eos_token and bos_token_id / eos_token_id: the prompt's
//                              special tokens (BOS by default for the Llama 3 names, as llama.cpp).
// The file becomes the tokenizer.json text it stands for (control and unknown tokens as special
// added tokens, user-defined ones as plain added tokens) and goes through the byte-level BPE
// reader (engine/tokenizer/tokenizer_bpe.h), so a GGUF file and the tokenizer.json it was
// converted from give the same ids. SentencePiece ("llama") and every other model are
// UNIMPLEMENTED, naming the key and value; a missing or ill-typed key is INVALID_ARGUMENT naming
// it. Immutable after Load: thread-safe.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/model/gguf.h"
#include "engine/tokenizer/tokenizer_bpe.h"

namespace saturn {

class GgufTokenizer {
 public:
  // Opens `path` (a .gguf file) and reads its tokenizer.
  static absl::StatusOr<std::unique_ptr<GgufTokenizer>> Load(const std::string& path);
  // The tokenizer of an open file (errors name file.name()).
  static absl::StatusOr<std::unique_ptr<GgufTokenizer>> FromFile(const GgufFile& file);

  // The prompt's ids: prefix (BOS), the text's ids, suffix (EOS).
  absl::StatusOr<std::vector<int>> EncodePrompt(std::string_view text) const;
  const BpeTokenizer& bpe() const { return *bpe_; }
  const std::vector<int>& prefix() const { return prefix_; }
  const std::vector<int>& suffix() const { return suffix_; }
  // The length of tokenizer.ggml.tokens (llama.cpp's n_vocab; unused placeholders included).
  int vocab_size() const { return vocab_size_; }
  // tokenizer.ggml.pre as the file names it.
  const std::string& pre() const { return pre_; }

 private:
  std::unique_ptr<BpeTokenizer> bpe_;
  std::vector<int> prefix_;
  std::vector<int> suffix_;
  int vocab_size_ = 0;
  std::string pre_;
};

// Bounds on what a file may ask for (beyond GgufFile's own, which bound arrays by the file).
inline constexpr size_t kGgufMaxTokens = size_t{1} << 24, kGgufMaxMerges = size_t{1} << 24;

}  // namespace saturn
