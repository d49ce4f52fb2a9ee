// GgufTokenizer: the GGUF metadata checked key by key, then written as the tokenizer.json it
// stands for and read by the byte-level BPE reader (the keys and the rule are in
// tokenizer_gguf.h; the pre-tokenizer names and BOS defaults are llama.cpp's, src/llama-vocab.cpp).
#include "engine/tokenizer/tokenizer_gguf.h"

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <unordered_map>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/base/status_macros.h"
#include "kernels/base/utf8.h"

namespace saturn {
namespace {

constexpr char kModelKey[] = "tokenizer.ggml.model";
constexpr char kPreKey[] = "tokenizer.ggml.pre";
constexpr char kTokensKey[] = "tokenizer.ggml.tokens";
constexpr char kTypesKey[] = "tokenizer.ggml.token_type";
constexpr char kMergesKey[] = "tokenizer.ggml.merges";

// llama.cpp's token types (tokenizer.ggml.token_type).
enum TokenType : int64_t {
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6
};

// Llama 3's tokenizer.json Split regex (Meta-Llama-3-8B), the one llama.cpp adapts for its
// LLAMA3 pre-tokenizer.
constexpr char kLlama3Pattern[] =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// One accepted tokenizer.ggml.pre: the pre_tokenizer (and model.ignore_merges) that Hugging
// Face's tokenizer.json gives the model it names, and llama.cpp's add_bos default for it.
struct PreTokenizer {
  nlohmann::json pre_tokenizer;
  bool ignore_merges = false;
  bool add_bos = false;
};

std::optional<PreTokenizer> FindPre(const std::string& name) {
  // llama.cpp's names for its LLAMA3 type that are Llama 3's own tokenizer.
  if (name == "llama-bpe" || name == "llama3" || name == "llama-v3") {
    PreTokenizer p;
    p.pre_tokenizer = {
        {"type", "Sequence"},
        {"pretokenizers", nlohmann::json::array({{{"type", "Split"},
                                                  {"pattern", {{"Regex", kLlama3Pattern}}},
                                                  {"behavior", "Isolated"},
                                                  {"invert", false}},
                                                 {{"type", "ByteLevel"},
                                                  {"add_prefix_space", false},
                                                  {"trim_offsets", true},
                                                  {"use_regex", false}}})}};
    p.ignore_merges = true;
    p.add_bos = true;
    return p;
  }
  // GPT-2's own tokenizer.json: ByteLevel with its regex.
  if (name == "gpt-2") {
    PreTokenizer p;
    p.pre_tokenizer = {{"type", "ByteLevel"},
                       {"add_prefix_space", false},
                       {"trim_offsets", true},
                       {"use_regex", true}};
    return p;
  }
  return std::nullopt;
}

absl::Status Missing(const GgufFile& f, const std::string& key) {
  return absl::InvalidArgumentError(absl::StrCat(f.name(), ": ", key, " is missing"));
}

absl::Status IllTyped(const GgufFile& f, const std::string& key, const std::string& want) {
  return absl::InvalidArgumentError(absl::StrCat(f.name(), ": ", key, " is not ", want));
}

const GgufValue* Find(const GgufFile& f, const std::string& key) {
  auto it = f.metadata().find(key);
  return it == f.metadata().end() ? nullptr : &it->second;
}

absl::StatusOr<std::string> RequiredString(const GgufFile& f, const std::string& key) {
  const GgufValue* v = Find(f, key);
  if (v == nullptr) return Missing(f, key);
  if (v->kind != GgufValue::Kind::kString) return IllTyped(f, key, "a string");
  return v->s;
}

// An array whose every element is a string (an empty array is one).
absl::StatusOr<const std::vector<GgufValue>*> StringArray(const GgufFile& f,
                                                          const std::string& key) {
  const GgufValue* v = Find(f, key);
  if (v == nullptr) return Missing(f, key);
  if (v->kind != GgufValue::Kind::kArray) return IllTyped(f, key, "an array of strings");
  for (const GgufValue& e : v->array) {
    if (e.kind != GgufValue::Kind::kString) return IllTyped(f, key, "an array of strings");
  }
  return &v->array;
}

absl::StatusOr<std::optional<bool>> OptionalBool(const GgufFile& f, const std::string& key) {
  const GgufValue* v = Find(f, key);
  if (v == nullptr) return std::optional<bool>();
  if (v->kind != GgufValue::Kind::kBool) return IllTyped(f, key, "a bool");
  return std::optional<bool>(v->b);
}

// A token id key (u32 as llama.cpp writes it; any integer kind is read): inside the vocabulary.
absl::StatusOr<std::optional<int>> OptionalId(const GgufFile& f, const std::string& key,
                                              size_t n_tokens) {
  const GgufValue* v = Find(f, key);
  if (v == nullptr) return std::optional<int>();
  const bool is_uint = v->kind == GgufValue::Kind::kUint;
  if (!is_uint && v->kind != GgufValue::Kind::kInt) return IllTyped(f, key, "an integer");
  if ((is_uint && v->u >= n_tokens) || (!is_uint && (v->i < 0 || uint64_t(v->i) >= n_tokens))) {
    return absl::InvalidArgumentError(
        absl::StrCat(f.name(), ": ", key, " ", is_uint ? absl::StrCat(v->u) : absl::StrCat(v->i),
                     " is outside the ", n_tokens, " tokens of ", kTokensKey));
  }
  return std::optional<int>(static_cast<int>(is_uint ? v->u : static_cast<uint64_t>(v->i)));
}

// The token types, one per token (all normal when the key is absent, as llama.cpp reads it).
absl::StatusOr<std::vector<int64_t>> TokenTypes(const GgufFile& f, size_t n_tokens) {
  const GgufValue* v = Find(f, kTypesKey);
  if (v == nullptr) return std::vector<int64_t>(n_tokens, kNormal);
  if (v->kind != GgufValue::Kind::kArray) return IllTyped(f, kTypesKey, "an array of integers");
  if (v->array.size() != n_tokens) {
    return absl::InvalidArgumentError(absl::StrCat(f.name(), ": ", kTypesKey, " has ",
                                                   v->array.size(), " entries but ", kTokensKey,
                                                   " has ", n_tokens, " (one type per token)"));
  }
  std::vector<int64_t> types(n_tokens);
  for (size_t i = 0; i < n_tokens; ++i) {
    const GgufValue& e = v->array[i];
    if (e.kind == GgufValue::Kind::kInt) {
      types[i] = e.i;
    } else if (e.kind == GgufValue::Kind::kUint) {
      types[i] = e.u > 100 ? -1 : static_cast<int64_t>(e.u);
    } else {
      return IllTyped(f, kTypesKey, "an array of integers");
    }
    if (types[i] < kNormal || types[i] > kByte) {
      return absl::InvalidArgumentError(
          absl::StrCat(f.name(), ": ", kTypesKey, "[", i, "] is ",
                       e.kind == GgufValue::Kind::kInt ? absl::StrCat(e.i) : absl::StrCat(e.u),
                       ", not a token type (1 normal, 2 unknown, 3 control, 4 user-defined, 5 "
                       "unused, 6 byte)"));
    }
    if (types[i] == kByte) {
      return absl::UnimplementedError(absl::StrCat(
          f.name(), ": ", kTypesKey, "[", i,
          "] is 6 (byte): byte-fallback tokens belong to SentencePiece vocabularies, which "
          "Saturn does not implement"));
    }
  }
  return types;
}

absl::Status CheckText(const GgufFile& f, const char* key, size_t i, const std::string& s) {
  if (s.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(f.name(), ": ", key, "[", i, "] is empty"));
  }
  if (const size_t bad = InvalidUtf8Offset(s); bad != std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat(f.name(), ": ", key, "[", i, "] is not valid UTF-8 (byte ", bad, ")"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<GgufTokenizer>> GgufTokenizer::Load(const std::string& path) {
  ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> f, GgufFile::Open(path));
  return FromFile(*f);
}

absl::StatusOr<std::unique_ptr<GgufTokenizer>> GgufTokenizer::FromFile(const GgufFile& f) {
  ASSIGN_OR_RETURN(const std::string model, RequiredString(f, kModelKey));
  if (model != "gpt2") {
    return absl::UnimplementedError(absl::StrCat(
        f.name(), ": ", kModelKey, " \"", model, "\"", model == "llama" ? " (SentencePiece)" : "",
        " is not implemented in Saturn (it reads byte-level BPE, ", kModelKey, " \"gpt2\")"));
  }
  if (Find(f, kPreKey) == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        f.name(), ": ", kPreKey,
        " is missing (llama.cpp then falls back to its \"default\" split, which is no Hugging "
        "Face pre-tokenizer; a current convert_hf_to_gguf.py writes the key)"));
  }
  ASSIGN_OR_RETURN(const std::string pre_name, RequiredString(f, kPreKey));
  std::optional<PreTokenizer> pre = FindPre(pre_name);
  if (!pre.has_value()) {
    return absl::UnimplementedError(absl::StrCat(
        f.name(), ": ", kPreKey, " \"", pre_name, "\" is not implemented in Saturn",
        pre_name == "default" ? " (llama.cpp's fallback split, which is no Hugging Face "
                                "pre-tokenizer)"
                              : "",
        "; it reads \"llama-bpe\", \"llama3\", \"llama-v3\" and \"gpt-2\", each split as "
        "Hugging Face's tokenizer.json splits that model's text"));
  }

  ASSIGN_OR_RETURN(const std::vector<GgufValue>* tokens, StringArray(f, kTokensKey));
  ASSIGN_OR_RETURN(const std::vector<GgufValue>* merges, StringArray(f, kMergesKey));
  const size_t n = tokens->size();
  if (n == 0 || n > kGgufMaxTokens) {
    return absl::InvalidArgumentError(absl::StrCat(f.name(), ": ", kTokensKey, " has ", n,
                                                   " tokens (1 to ", kGgufMaxTokens, " read)"));
  }
  if (merges->size() > kGgufMaxMerges) {
    return absl::InvalidArgumentError(absl::StrCat(f.name(), ": ", kMergesKey, " has ",
                                                   merges->size(), " merges (at most ",
                                                   kGgufMaxMerges, " read)"));
  }
  ASSIGN_OR_RETURN(const std::vector<int64_t> types, TokenTypes(f, n));

  // tokenizer.json: normal tokens are the BPE vocabulary, the others added tokens; unused
  // placeholders ("[PAD123]") have an id but no text.
  nlohmann::json vocab = nlohmann::json::object();
  nlohmann::json added = nlohmann::json::array();
  std::unordered_map<std::string, size_t> seen;  // text -> its first id
  seen.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    if (types[i] == kUnused) continue;
    const std::string& text = (*tokens)[i].s;
    RETURN_IF_ERROR(CheckText(f, kTokensKey, i, text));
    if (const auto [it, fresh] = seen.emplace(text, i); !fresh) {
      return absl::InvalidArgumentError(absl::StrCat(f.name(), ": ", kTokensKey, "[", i, "] \"",
                                                     text, "\" duplicates ", kTokensKey, "[",
                                                     it->second, "]"));
    }
    if (types[i] == kNormal) {
      vocab[text] = i;
    } else {
      added.push_back({{"id", i},
                       {"content", text},
                       {"single_word", false},
                       {"lstrip", false},
                       {"rstrip", false},
                       {"normalized", false},
                       {"special", types[i] != kUserDefined}});
    }
  }
  nlohmann::json merge_list = nlohmann::json::array();
  for (size_t i = 0; i < merges->size(); ++i) {
    const std::string& m = (*merges)[i].s;
    RETURN_IF_ERROR(CheckText(f, kMergesKey, i, m));
    const size_t space = m.find(' ');
    if (space == 0 || space == std::string::npos || space + 1 == m.size() ||
        m.find(' ', space + 1) != std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat(f.name(), ": ", kMergesKey, "[", i, "] \"", m,
                                                     "\" is not two tokens and one space"));
    }
    merge_list.push_back(m);
  }

  // The prompt's special tokens: llama.cpp's default for the pre-tokenizer, then the file's keys.
  bool add_bos = pre->add_bos, add_eos = false;
  ASSIGN_OR_RETURN(const std::optional<bool> bos_key,
                   OptionalBool(f, "tokenizer.ggml.add_bos_token"));
  ASSIGN_OR_RETURN(const std::optional<bool> eos_key,
                   OptionalBool(f, "tokenizer.ggml.add_eos_token"));
  if (bos_key.has_value()) add_bos = *bos_key;
  if (eos_key.has_value()) add_eos = *eos_key;
  ASSIGN_OR_RETURN(const std::optional<int> bos, OptionalId(f, "tokenizer.ggml.bos_token_id", n));
  ASSIGN_OR_RETURN(const std::optional<int> eos, OptionalId(f, "tokenizer.ggml.eos_token_id", n));
  auto t = std::unique_ptr<GgufTokenizer>(new GgufTokenizer());
  auto special = [&](bool add, bool from_key, const std::optional<int>& id, const char* what,
                     std::vector<int>* out) -> absl::Status {
    if (!add) return absl::OkStatus();
    if (!id.has_value()) {
      return absl::InvalidArgumentError(absl::StrCat(
          f.name(), ": tokenizer.ggml.add_", what, "_token is ",
          from_key ? "true" : absl::StrCat("true by default for ", kPreKey, " \"", pre_name, "\""),
          " but tokenizer.ggml.", what, "_token_id is missing"));
    }
    out->push_back(*id);
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(special(add_bos, bos_key.has_value(), bos, "bos", &t->prefix_));
  RETURN_IF_ERROR(special(add_eos, eos_key.has_value(), eos, "eos", &t->suffix_));

  nlohmann::json json = {{"version", "1.0"},
                         {"added_tokens", std::move(added)},
                         {"normalizer", nullptr},
                         {"pre_tokenizer", pre->pre_tokenizer},
                         {"post_processor", nullptr},
                         {"decoder",
                          {{"type", "ByteLevel"},
                           {"add_prefix_space", true},
                           {"trim_offsets", true},
                           {"use_regex", true}}},
                         {"model",
                          {{"type", "BPE"},
                           {"dropout", nullptr},
                           {"unk_token", nullptr},
                           {"continuing_subword_prefix", nullptr},
                           {"end_of_word_suffix", nullptr},
                           {"fuse_unk", false},
                           {"byte_fallback", false},
                           {"ignore_merges", pre->ignore_merges},
                           {"vocab", std::move(vocab)},
                           {"merges", std::move(merge_list)}}}};
  std::string text;
  try {
    text = json.dump();  // every string was checked as UTF-8 above
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(f.name(), ": tokenizer metadata: ", e.what()));
  }
  json = nlohmann::json();
  ASSIGN_OR_RETURN(t->bpe_, BpeTokenizer::Parse(text, f.name() + " (tokenizer.ggml.*)"));
  t->vocab_size_ = static_cast<int>(n);
  t->pre_ = pre_name;
  return t;
}

absl::StatusOr<std::vector<int>> GgufTokenizer::EncodePrompt(std::string_view text) const {
  ASSIGN_OR_RETURN(std::vector<int> body, bpe_->Encode(text));
  std::vector<int> ids = prefix_;
  ids.insert(ids.end(), body.begin(), body.end());
  ids.insert(ids.end(), suffix_.begin(), suffix_.end());
  return ids;
}

}  // namespace saturn
