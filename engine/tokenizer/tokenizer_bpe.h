// Byte-level BPE from a Hugging Face tokenizer.json, as GPT-2 and Llama 3 use it: added
// (special) tokens matched first, then the pre-tokenizer's regex split (ICU regex, so \p{L}
// and \p{N} mean what they mean in transformers' Rust code), each piece's bytes mapped to
// printable characters (GPT-2's bytes_to_unicode), BPE merges by rank, and the reverse for
// decoding. Anything else tokenizer.json may ask for (a normalizer, another model type or
// pre-tokenizer, merge prefixes/suffixes) is refused at load with an error naming it, never
// tokenized differently from transformers. Immutable after Load: thread-safe.
#pragma once

#include <array>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "absl/status/statusor.h"

namespace saturn {

class BpeTokenizer {
 public:
  // Parses tokenizer.json text (`name` names it in errors).
  static absl::StatusOr<std::unique_ptr<BpeTokenizer>> Parse(const std::string& json_text,
                                                             const std::string& name);
  // Reads and parses a tokenizer.json file.
  static absl::StatusOr<std::unique_ptr<BpeTokenizer>> Load(const std::string& path);
  ~BpeTokenizer();

  // The ids of `text` (UTF-8) without any template (transformers' add_special_tokens=False):
  // added tokens written in the text become their ids. Ill-formed UTF-8 is INVALID_ARGUMENT.
  absl::StatusOr<std::vector<int>> Encode(std::string_view text) const;
  // The bytes of the ids, concatenated (special tokens skipped when skip_special).
  std::string Decode(const std::vector<int>& ids, bool skip_special = false) const;
  // One token's bytes ("" for an unknown id): streaming text concatenates these and emits
  // whole UTF-8 characters as they complete.
  std::string TokenBytes(int id) const;
  // The id of an added token's content or vocabulary entry, -1 when none.
  int TokenId(const std::string& token) const;
  bool IsSpecial(int id) const;
  int vocab_size() const { return vocab_size_; }

 private:
  struct Added {
    std::string content;
    int id;
    bool special;
  };
  struct PreStep;  // one pre-tokenizer step (regex split or byte-level)
  BpeTokenizer();
  absl::Status EncodeWord(const std::string& mapped, std::vector<int>* ids) const;
  void PreTokenize(const std::string& text, std::vector<std::string>* pieces) const;

  std::unordered_map<std::string, int> vocab_;  // byte-mapped token -> id
  std::unordered_map<int, std::string> id_to_token_;
  std::unordered_map<std::string, int> merge_rank_;  // "a b" -> rank
  std::vector<Added> added_;                         // longest content first
  std::array<bool, 256> added_first_{};  // the bytes an added token's content starts with
  std::vector<std::unique_ptr<PreStep>> pre_;
  bool ignore_merges_ = false;
  int vocab_size_ = 0;
};

}  // namespace saturn
