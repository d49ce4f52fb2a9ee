// Reads a model's chat template and its special tokens' texts (model_chat_template.h).
#include "server/http/model_chat_template.h"

#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>

#include "absl/strings/str_cat.h"
#include "engine/model/gguf.h"
#include "kernels/base/json_depth.h"
#include "kernels/base/read_file.h"

namespace saturn {
namespace {

using Json = nlohmann::json;
namespace fs = std::filesystem;

absl::Status Refuse(const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat("messages: ", why));
}

// A parsed template, or the refusal naming where it came from and why it does not parse.
absl::StatusOr<ModelChatTemplate> Parsed(std::string source, std::string origin, std::string bos,
                                         std::string eos) {
  absl::StatusOr<ChatTemplate> t = ChatTemplate::Parse(std::move(source));
  if (!t.ok()) {
    return Refuse(absl::StrCat("the model's chat template (", origin,
                               ") cannot be rendered by Saturn: ", t.status().message(),
                               "; render the conversation yourself and send it to "
                               "/v1/completions"));
  }
  return ModelChatTemplate{std::move(*t), std::move(bos), std::move(eos), std::move(origin)};
}

// A special token in tokenizer_config.json: "text" or {"content": "text", ...}.
std::string TokenText(const Json& config, const char* key) {
  auto it = config.find(key);
  if (it == config.end()) return "";
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) {
    return (*it)["content"].get<std::string>();
  }
  return "";
}

// `dir`/tokenizer_config.json as an object ({} where there is none).
absl::StatusOr<Json> TokenizerConfig(const std::string& dir) {
  const fs::path path = fs::path(dir) / "tokenizer_config.json";
  std::error_code ec;
  if (!fs::exists(path, ec)) return Json::object();
  absl::StatusOr<std::string> text = ReadFileBounded(path.string(), kMaxConfigFileBytes);
  if (!text.ok()) return Refuse(std::string(text.status().message()));
  if (JsonNestingDepth(*text) > kMaxFileJsonDepth) {
    return Refuse(absl::StrCat(path.string(), ": nested deeper than ", kMaxFileJsonDepth));
  }
  Json config = Json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (!config.is_object()) return Refuse(absl::StrCat(path.string(), ": not a JSON object"));
  return config;
}

absl::StatusOr<ModelChatTemplate> FromCheckpoint(const std::string& dir) {
  absl::StatusOr<Json> read = TokenizerConfig(dir);
  if (!read.ok()) return read.status();
  const Json& config = *read;
  const fs::path config_path = fs::path(dir) / "tokenizer_config.json";
  std::error_code ec;
  const std::string bos = TokenText(config, "bos_token"), eos = TokenText(config, "eos_token");
  // transformers prefers chat_template.jinja beside the config when both are there.
  const fs::path jinja = fs::path(dir) / "chat_template.jinja";
  if (fs::exists(jinja, ec)) {
    absl::StatusOr<std::string> text =
        ReadFileBounded(jinja.string(), ChatTemplate::kMaxSourceBytes);
    if (!text.ok()) return Refuse(std::string(text.status().message()));
    return Parsed(std::move(*text), jinja.string(), bos, eos);
  }
  auto it = config.find("chat_template");
  if (it != config.end() && it->is_string()) {
    return Parsed(it->get<std::string>(), absl::StrCat(config_path.string(), " chat_template"), bos,
                  eos);
  }
  if (it != config.end() && it->is_array()) {  // named templates: the default one
    for (const Json& named : *it) {
      if (named.is_object() && named.value("name", "") == "default" && named.contains("template") &&
          named["template"].is_string()) {
        return Parsed(named["template"].get<std::string>(),
                      absl::StrCat(config_path.string(), " chat_template \"default\""), bos, eos);
      }
    }
    return Refuse(absl::StrCat(config_path.string(),
                               ": chat_template lists named templates but none named "
                               "\"default\"; use /v1/completions"));
  }
  return Refuse(
      "the checkpoint has no chat template (chat_template.jinja or tokenizer_config.json's "
      "chat_template); use /v1/completions");
}

// The text of the token whose id `key` holds, "" where the key or the token is missing.
std::string GgufTokenText(const GgufFile& f, const char* key) {
  absl::StatusOr<uint64_t> id = f.GetUint(key);
  auto tokens = f.metadata().find("tokenizer.ggml.tokens");
  if (!id.ok() || tokens == f.metadata().end() || tokens->second.kind != GgufValue::Kind::kArray ||
      *id >= tokens->second.array.size()) {
    return "";
  }
  const GgufValue& t = tokens->second.array[*id];
  return t.kind == GgufValue::Kind::kString ? t.s : "";
}

absl::StatusOr<ModelChatTemplate> FromGguf(const std::string& path) {
  absl::StatusOr<std::unique_ptr<GgufFile>> f = GgufFile::Open(path);
  if (!f.ok()) return Refuse(std::string(f.status().message()));
  absl::StatusOr<std::string> source = (*f)->GetString("tokenizer.chat_template");
  if (!source.ok()) {
    return Refuse(
        "the GGUF file has no chat template (tokenizer.chat_template); use /v1/completions");
  }
  return Parsed(std::move(*source), absl::StrCat(path, " tokenizer.chat_template"),
                GgufTokenText(**f, "tokenizer.ggml.bos_token_id"),
                GgufTokenText(**f, "tokenizer.ggml.eos_token_id"));
}

}  // namespace

absl::StatusOr<ModelChatTemplate> LoadModelChatTemplate(const std::string& model,
                                                        const std::string& template_file) {
  std::error_code ec;
  if (template_file.empty()) {
    if (fs::is_regular_file(model, ec) && fs::path(model).extension() == ".gguf") {
      return FromGguf(model);
    }
    if (fs::is_directory(model, ec)) return FromCheckpoint(model);
    return Refuse(absl::StrCat("the built-in model \"", model,
                               "\" has no chat template; use /v1/completions or start the server "
                               "with --chat_template FILE"));
  }
  // The model's own special tokens, whether or not its own template could be used.
  std::string bos, eos;
  if (fs::is_regular_file(model, ec) && fs::path(model).extension() == ".gguf") {
    if (absl::StatusOr<std::unique_ptr<GgufFile>> f = GgufFile::Open(model); f.ok()) {
      bos = GgufTokenText(**f, "tokenizer.ggml.bos_token_id");
      eos = GgufTokenText(**f, "tokenizer.ggml.eos_token_id");
    }
  } else if (fs::is_directory(model, ec)) {
    if (absl::StatusOr<Json> config = TokenizerConfig(model); config.ok()) {
      bos = TokenText(*config, "bos_token"), eos = TokenText(*config, "eos_token");
    }
  }
  absl::StatusOr<std::string> text = ReadFileBounded(template_file, ChatTemplate::kMaxSourceBytes);
  if (!text.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--chat_template: ", text.status().message()));
  }
  absl::StatusOr<ChatTemplate> t = ChatTemplate::Parse(std::move(*text));
  if (!t.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--chat_template ", template_file, ": ", t.status().message()));
  }
  return ModelChatTemplate{std::move(*t), bos, eos,
                           absl::StrCat(template_file, " (--chat_template)")};
}

}  // namespace saturn
