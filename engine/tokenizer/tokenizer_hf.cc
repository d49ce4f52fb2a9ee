// HfTokenizer: which special tokens a prompt gets (the rule is in tokenizer_hf.h).
#include "engine/tokenizer/tokenizer_hf.h"

#include <filesystem>
#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/base/json_depth.h"
#include "kernels/base/read_file.h"

namespace saturn {
namespace {

// The content of a tokenizer_config.json token entry: "<s>" or {"content": "<s>", ...}.
std::string TokenContent(const nlohmann::json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) {
    return v["content"].get<std::string>();
  }
  return "";
}

// Rule 1: tokenizer_config.json's add_bos_token / add_eos_token.
absl::Status FromConfig(const nlohmann::json& cfg, const BpeTokenizer& bpe, const std::string& name,
                        std::vector<int>* prefix, std::vector<int>* suffix) {
  for (const char* key : {"add_bos_token", "add_eos_token"}) {
    if (!cfg.contains(key) || !cfg[key].is_boolean() || !cfg[key].get<bool>()) continue;
    const bool bos = std::string(key) == "add_bos_token";
    const char* token_key = bos ? "bos_token" : "eos_token";
    const std::string content = TokenContent(cfg.value(token_key, nlohmann::json()));
    const int id = content.empty() ? -1 : bpe.TokenId(content);
    if (id < 0) {
      return absl::InvalidArgumentError(absl::StrCat(name, ": ", key, " is true but ", token_key,
                                                     " \"", content,
                                                     "\" is not a token of tokenizer.json"));
    }
    (bos ? prefix : suffix)->push_back(id);
  }
  return absl::OkStatus();
}

// Rule 2: one post-processor (recursing into Sequence); the new tokens wrap the old.
absl::Status FromPostProcessor(const nlohmann::json& p, const std::string& name,
                               std::vector<int>* prefix, std::vector<int>* suffix) {
  if (p.is_null()) return absl::OkStatus();
  const std::string type = p.value("type", "<missing>");
  if (type == "ByteLevel") return absl::OkStatus();  // offsets only
  if (type == "Sequence") {
    for (const nlohmann::json& q : p.at("processors")) {
      if (absl::Status s = FromPostProcessor(q, name, prefix, suffix); !s.ok()) return s;
    }
    return absl::OkStatus();
  }
  if (type != "TemplateProcessing") {
    return absl::UnimplementedError(
        absl::StrCat(name, ": post_processor ", type,
                     " is not implemented in Saturn (ByteLevel, TemplateProcessing and a "
                     "Sequence of them are)"));
  }
  std::vector<int> before;
  std::vector<int> after;
  bool seen_a = false;
  for (const nlohmann::json& piece : p.at("single")) {
    if (piece.contains("Sequence")) {
      if (piece["Sequence"].value("id", "") != "A" || seen_a) {
        return absl::UnimplementedError(
            absl::StrCat(name, ": post_processor template piece ", piece.dump().substr(0, 120)));
      }
      seen_a = true;
      continue;
    }
    const std::string id = piece.at("SpecialToken").at("id").get<std::string>();
    const nlohmann::json& special = p.at("special_tokens").at(id);
    for (const nlohmann::json& i : special.at("ids")) {
      if (!i.is_number_integer() || i.get<int64_t>() < 0 || i.get<int64_t>() > INT32_MAX ||
          (i.is_number_unsigned() && i.get<uint64_t>() > uint64_t{INT32_MAX})) {
        return absl::InvalidArgumentError(absl::StrCat(name, ": post_processor special token ", id,
                                                       " has id ", i.dump(),
                                                       ", not a token id (0 to 2^31 - 1)"));
      }
      (seen_a ? after : before).push_back(static_cast<int>(i.get<int64_t>()));
    }
  }
  if (!seen_a) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": post_processor TemplateProcessing single has no $A"));
  }
  prefix->insert(prefix->begin(), before.begin(), before.end());
  suffix->insert(suffix->end(), after.begin(), after.end());
  return absl::OkStatus();
}

absl::StatusOr<nlohmann::json> ReadJson(const std::string& path) {
  absl::StatusOr<std::string> read = ReadFileBounded(path, kMaxTokenizerFileBytes);
  if (!read.ok()) return read.status();
  const std::string& text = *read;
  if (absl::Status s = CheckJsonDepth(text, kMaxFileJsonDepth, path); !s.ok()) return s;
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a JSON object"));
  }
  return j;
}

}  // namespace

absl::StatusOr<std::unique_ptr<HfTokenizer>> HfTokenizer::Load(const std::string& dir) {
  const std::string json_path = (std::filesystem::path(dir) / "tokenizer.json").string();
  const std::string config_path = (std::filesystem::path(dir) / "tokenizer_config.json").string();
  absl::StatusOr<nlohmann::json> tok = ReadJson(json_path);
  if (!tok.ok()) return tok.status();
  std::unique_ptr<HfTokenizer> t(new HfTokenizer());
  absl::StatusOr<std::unique_ptr<BpeTokenizer>> bpe = BpeTokenizer::Parse(tok->dump(), json_path);
  if (!bpe.ok()) return bpe.status();
  t->bpe_ = std::move(*bpe);

  nlohmann::json cfg = nlohmann::json::object();
  if (std::filesystem::exists(config_path)) {
    absl::StatusOr<nlohmann::json> c = ReadJson(config_path);
    if (!c.ok()) return c.status();
    cfg = std::move(*c);
  }
  try {
    if (cfg.contains("add_bos_token") || cfg.contains("add_eos_token")) {
      t->source_ = "tokenizer_config.json add_bos_token";
      absl::Status s = FromConfig(cfg, *t->bpe_, config_path, &t->prefix_, &t->suffix_);
      if (!s.ok()) return s;
    } else if (tok->contains("post_processor") && !(*tok)["post_processor"].is_null()) {
      t->source_ = "tokenizer.json post_processor";
      absl::Status s =
          FromPostProcessor((*tok)["post_processor"], json_path, &t->prefix_, &t->suffix_);
      if (!s.ok()) return s;
    } else {
      t->source_ = "none";
    }
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(json_path, ": post_processor: ", e.what()));
  }
  return t;
}

absl::StatusOr<std::vector<int>> HfTokenizer::EncodePrompt(std::string_view text) const {
  absl::StatusOr<std::vector<int>> body = bpe_->Encode(text);
  if (!body.ok()) return body.status();
  std::vector<int> ids = prefix_;
  ids.insert(ids.end(), body->begin(), body->end());
  ids.insert(ids.end(), suffix_.begin(), suffix_.end());
  return ids;
}

}  // namespace saturn
