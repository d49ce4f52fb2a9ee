// LoadTextTokenizer and its three kinds. The tokenizer.json and GGUF kinds exist only where the
// byte-level BPE reader is built (ICU found: SATURN_WITH_TOKENIZER_JSON).
#include "engine/tokenizer/text_tokenizer.h"

#include <algorithm>
#include <cstdint>
#include <filesystem>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/model/gguf.h"
#include "engine/model/model_config.h"
#include "engine/tokenizer/byte_tokenizer.h"
#ifdef SATURN_WITH_TOKENIZER_JSON
#include "engine/tokenizer/tokenizer_gguf.h"
#include "engine/tokenizer/tokenizer_hf.h"
#endif

namespace saturn {
namespace {

class ByteTextTokenizer final : public TextTokenizer {
 public:
  absl::StatusOr<std::vector<int>> Encode(std::string_view text) const override {
    return ByteTokenizer().Encode(text, /*add_bos=*/true);
  }
  absl::StatusOr<std::vector<int>> EncodeRendered(std::string_view text) const override {
    return ByteTokenizer().Encode(text, /*add_bos=*/false);
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

// A byte-level BPE tokenizer with its prompt's special tokens: T is HfTokenizer (tokenizer.json)
// or GgufTokenizer (a .gguf file's metadata), each with EncodePrompt, bpe() and id_limit.
template <typename T>
class BpeTextTokenizer final : public TextTokenizer {
 public:
  BpeTextTokenizer(std::unique_ptr<T> t, std::string kind, std::string describe)
      : t_(std::move(t)), kind_(std::move(kind)), describe_(std::move(describe)) {}
  absl::StatusOr<std::vector<int>> Encode(std::string_view text) const override {
    return t_->EncodePrompt(text);
  }
  absl::StatusOr<std::vector<int>> EncodeRendered(std::string_view text) const override {
    return t_->bpe().Encode(text);
  }
  // transformers' decode(skip_special_tokens=True), vLLM's default for streamed text.
  std::string TokenBytes(int id) const override {
    return t_->bpe().IsSpecial(id) ? "" : t_->bpe().TokenBytes(id);
  }
  int max_prompt_text_bytes(int max_model_len) const override {
    return static_cast<int>(
        std::min<int64_t>(int64_t{max_model_len} * kBpeBytesPerToken, 64 << 20));
  }
  int id_limit() const override { return id_limit_; }
  std::string kind() const override { return kind_; }
  std::string Describe() const override { return describe_; }

 private:
  std::unique_ptr<T> t_;
  std::string kind_, describe_;
  int id_limit_ = IdLimit(*t_);
  static int IdLimit(const HfTokenizer& t) { return t.bpe().vocab_size(); }
  // llama.cpp's n_vocab: unused placeholders included.
  static int IdLimit(const GgufTokenizer& t) { return t.vocab_size(); }
};

std::unique_ptr<TextTokenizer> FromJson(std::unique_ptr<HfTokenizer> t) {
  std::string describe =
      absl::StrCat("tokenizer.json (byte-level BPE, ", t->bpe().vocab_size(),
                   " ids; special tokens from ", t->special_tokens_source(), ": ",
                   t->prefix().size(), " before, ", t->suffix().size(), " after)");
  return std::make_unique<BpeTextTokenizer<HfTokenizer>>(std::move(t), "tokenizer.json",
                                                         std::move(describe));
}

std::unique_ptr<TextTokenizer> FromGguf(std::unique_ptr<GgufTokenizer> t) {
  std::string describe = absl::StrCat(
      "GGUF metadata (byte-level BPE, pre-tokenizer \"", t->pre(), "\", ", t->vocab_size(),
      " ids; special tokens from add_bos_token/add_eos_token: ", t->prefix().size(), " before, ",
      t->suffix().size(), " after)");
  return std::make_unique<BpeTextTokenizer<GgufTokenizer>>(std::move(t), "gguf",
                                                           std::move(describe));
}
#endif

constexpr char kSkipHint[] = "; --skip_tokenizer_init serves token ids only";

}  // namespace

absl::StatusOr<std::unique_ptr<TextTokenizer>> LoadTextTokenizer(const std::string& model,
                                                                 bool skip) {
  if (skip) return nullptr;
  if (PresetConfig(model).ok()) return std::make_unique<ByteTextTokenizer>();
  std::error_code ec;
  if (std::filesystem::is_regular_file(model, ec) &&
      std::filesystem::path(model).extension() == ".gguf") {
    // A file that does not parse is the weight loader's to report; one without tokenizer
    // metadata has no tokenizer (token ids only), as a checkpoint without tokenizer.json.
    absl::StatusOr<std::unique_ptr<GgufFile>> f = GgufFile::Open(model);
    if (!f.ok() || !(*f)->metadata().contains("tokenizer.ggml.model")) return nullptr;
#ifdef SATURN_WITH_TOKENIZER_JSON
    absl::StatusOr<std::unique_ptr<GgufTokenizer>> t = GgufTokenizer::FromFile(**f);
    if (!t.ok()) {
      return absl::Status(t.status().code(), absl::StrCat(t.status().message(), kSkipHint));
    }
    return FromGguf(std::move(*t));
#else
    return absl::UnimplementedError(
        absl::StrCat(model,
                     ": this build has no byte-level BPE reader for the file's tokenizer (ICU was "
                     "not found when it was built)",
                     kSkipHint));
#endif
  }
  const std::filesystem::path json = std::filesystem::path(model) / "tokenizer.json";
  if (!std::filesystem::exists(json)) return nullptr;
#ifdef SATURN_WITH_TOKENIZER_JSON
  absl::StatusOr<std::unique_ptr<HfTokenizer>> t = HfTokenizer::Load(model);
  if (!t.ok()) {
    return absl::Status(t.status().code(), absl::StrCat(t.status().message(), kSkipHint));
  }
  return FromJson(std::move(*t));
#else
  return absl::UnimplementedError(absl::StrCat(
      json.string(),
      ": this build has no tokenizer.json reader (ICU was not found when it was built)",
      kSkipHint));
#endif
}

}  // namespace saturn
