// LoadTextTokenizer and its two kinds. The tokenizer.json kind exists only where the reader
// is built (ICU found: SATURN_WITH_TOKENIZER_JSON).
#include "engine/tokenizer/text_tokenizer.h"

#include <algorithm>
#include <cstdint>
#include <filesystem>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/model/model_config.h"
#include "engine/tokenizer/byte_tokenizer.h"
#ifdef SATURN_WITH_TOKENIZER_JSON
#include "engine/tokenizer/tokenizer_hf.h"
#endif

namespace saturn {
namespace {

class ByteTextTokenizer final : public TextTokenizer {
 public:
  absl::StatusOr<std::vector<int>> Encode(std::string_view text) const override {
    return ByteTokenizer().Encode(text, /*add_bos=*/true);
  }
  std::string TokenBytes(int id) const override {
    if (!ByteTokenizer::IsByte(id)) return "";
    return std::string(1, static_cast<char>(id - ByteTokenizer::kByteOffset));
  }
  // One token per byte plus BOS, plus the one token a request must generate, fit the context.
  int max_prompt_text_bytes(int max_model_len) const override { return max_model_len - 2; }
  int id_limit() const override { return ByteTokenizer::kByteOffset + 256; }
  std::string kind() const override { return "byte"; }
  std::string Describe() const override { return "built-in byte tokenizer (BOS, one id a byte)"; }
};

#ifdef SATURN_WITH_TOKENIZER_JSON
// Byte-level BPE gives at most one token per byte, and English text about four bytes per
// token; 8 bytes per context token lets any prompt that can fit through and bounds the work.
constexpr int kBpeBytesPerToken = 8;

class JsonTextTokenizer final : public TextTokenizer {
 public:
  explicit JsonTextTokenizer(std::unique_ptr<HfTokenizer> t) : t_(std::move(t)) {}
  absl::StatusOr<std::vector<int>> Encode(std::string_view text) const override {
    return t_->EncodePrompt(text);
  }
  // transformers' decode(skip_special_tokens=True), vLLM's default for streamed text.
  std::string TokenBytes(int id) const override {
    return t_->bpe().IsSpecial(id) ? "" : t_->bpe().TokenBytes(id);
  }
  int max_prompt_text_bytes(int max_model_len) const override {
    return static_cast<int>(
        std::min<int64_t>(int64_t{max_model_len} * kBpeBytesPerToken, 64 << 20));
  }
  int id_limit() const override { return t_->bpe().vocab_size(); }
  std::string kind() const override { return "tokenizer.json"; }
  std::string Describe() const override {
    return absl::StrCat("tokenizer.json (byte-level BPE, ", t_->bpe().vocab_size(),
                        " ids; special tokens from ", t_->special_tokens_source(), ": ",
                        t_->prefix().size(), " before, ", t_->suffix().size(), " after)");
  }

 private:
  std::unique_ptr<HfTokenizer> t_;
};
#endif

}  // namespace

absl::StatusOr<std::unique_ptr<TextTokenizer>> LoadTextTokenizer(const std::string& model,
                                                                 bool skip) {
  if (skip) return nullptr;
  if (PresetConfig(model).ok()) return std::make_unique<ByteTextTokenizer>();
  const std::filesystem::path json = std::filesystem::path(model) / "tokenizer.json";
  if (!std::filesystem::exists(json)) return nullptr;
#ifdef SATURN_WITH_TOKENIZER_JSON
  absl::StatusOr<std::unique_ptr<HfTokenizer>> t = HfTokenizer::Load(model);
  if (!t.ok()) {
    return absl::Status(
        t.status().code(),
        absl::StrCat(t.status().message(), "; --skip_tokenizer_init serves token ids only"));
  }
  return std::make_unique<JsonTextTokenizer>(std::move(*t));
#else
  return absl::UnimplementedError(
      absl::StrCat(json.string(),
                   ": this build has no tokenizer.json reader (ICU was not found when it was "
                   "built); --skip_tokenizer_init serves token ids only"));
#endif
}

}  // namespace saturn
