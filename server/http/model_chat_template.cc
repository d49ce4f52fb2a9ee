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

// What a model's own files hold: its template's source and where it came from, or why there is
// none (`missing`), and its special tokens' texts either way.
struct Own {
  std::string source, origin, bos, eos;
  absl::Status missing;
};

Own FromCheckpoint(const std::string& dir) {
  Own own;
  absl::StatusOr<Json> read = TokenizerConfig(dir);
  if (!read.ok()) {
    own.missing = read.status();
    return own;
  }
  const Json& config = *read;
  const fs::path config_path = fs::path(dir) / "tokenizer_config.json";
  std::error_code ec;
  own.bos = TokenText(config, "bos_token"), own.eos = TokenText(config, "eos_token");
  // transformers prefers chat_template.jinja beside the config when both are there.
  const fs::path jinja = fs::path(dir) / "chat_template.jinja";
  auto it = config.find("chat_template");
  if (fs::exists(jinja, ec)) {
    absl::StatusOr<std::string> text =
        ReadFileBounded(jinja.string(), ChatTemplate::kMaxSourceBytes);
    if (!text.ok()) {
      own.missing = Refuse(std::string(text.status().message()));
    } else {
      own.source = std::move(*text), own.origin = jinja.string();
    }
  } else if (it != config.end() && it->is_string()) {
    own.source = it->get<std::string>();
    own.origin = absl::StrCat(config_path.string(), " chat_template");
  } else if (it != config.end() && it->is_array()) {  // named templates: the default one
    own.missing = Refuse(absl::StrCat(config_path.string(),
                                      ": chat_template lists named templates but none named "
                                      "\"default\"; use /v1/completions"));
    for (const Json& named : *it) {
      if (named.is_object() && named.value("name", "") == "default" && named.contains("template") &&
          named["template"].is_string()) {
        own.source = named["template"].get<std::string>();
        own.origin = absl::StrCat(config_path.string(), " chat_template \"default\"");
        own.missing = absl::OkStatus();
        break;
      }
    }
  } else {
    own.missing = Refuse(
        "the checkpoint has no chat template (chat_template.jinja or tokenizer_config.json's "
        "chat_template); use /v1/completions");
  }
  return own;
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

Own FromGguf(const std::string& path) {
  Own own;
  absl::StatusOr<std::unique_ptr<GgufFile>> f = GgufFile::Open(path);
  if (!f.ok()) {
    own.missing = Refuse(std::string(f.status().message()));
    return own;
  }
  own.bos = GgufTokenText(**f, "tokenizer.ggml.bos_token_id");
  own.eos = GgufTokenText(**f, "tokenizer.ggml.eos_token_id");
  absl::StatusOr<std::string> source = (*f)->GetString("tokenizer.chat_template");
  if (!source.ok()) {
    own.missing =
        Refuse("the GGUF file has no chat template (tokenizer.chat_template); use /v1/completions");
  } else {
    own.source = std::move(*source), own.origin = absl::StrCat(path, " tokenizer.chat_template");
  }
  return own;
}

Own FromModel(const std::string& model) {
  std::error_code ec;
  if (fs::is_regular_file(model, ec) && fs::path(model).extension() == ".gguf") {
    return FromGguf(model);
  }
  if (fs::is_directory(model, ec)) return FromCheckpoint(model);
  Own own;
  own.missing = Refuse(absl::StrCat("the built-in model \"", model,
                                    "\" has no chat template; use /v1/completions or start the "
                                    "server with --chat_template FILE"));
  return own;
}

}  // namespace

absl::StatusOr<ModelChatTemplate> LoadModelChatTemplate(const std::string& model,
                                                        const std::string& template_file) {
  // The model's own special tokens fill a --chat_template too, whether or not its own template
  // could be used.
  Own own = FromModel(model);
  if (template_file.empty()) {
    if (!own.missing.ok()) return own.missing;
    return Parsed(std::move(own.source), std::move(own.origin), std::move(own.bos),
                  std::move(own.eos));
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
  return ModelChatTemplate{std::move(*t), std::move(own.bos), std::move(own.eos),
                           absl::StrCat(template_file, " (--chat_template)")};
}

}  // namespace saturn
