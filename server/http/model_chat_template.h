// Where /v1/chat/completions gets a model's chat template and the special tokens it renders
// with, read once at start as transformers' apply_chat_template and llama.cpp's server read them:
//   a checkpoint directory: chat_template.jinja, else tokenizer_config.json's chat_template (a
//     string, or a list of {name, template} whose "default" is taken), with that file's
//     bos_token and eos_token (a string or an AddedToken's content);
//   a .gguf file: tokenizer.chat_template, with the texts of tokenizer.ggml.bos_token_id and
//     eos_token_id in tokenizer.ggml.tokens;
//   a built-in preset: none;
//   `template_file` (--chat_template) in place of any of these, with the model's own bos_token
//   and eos_token.
// Where there is none, or it does not parse (engine/tokenizer/chat_template.h names the line and
// what is not supported), the status is the error every chat request gets (INVALID_ARGUMENT on
// `messages`, naming the file and saying to use /v1/completions). A --chat_template file that
// cannot be read or parsed is an error naming the flag (the server does not start).
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "engine/tokenizer/chat_template.h"

namespace saturn {

struct ModelChatTemplate {
  ChatTemplate tmpl;
  std::string bos_token, eos_token;
  std::string origin;  // where it came from, for the start-up log
};

absl::StatusOr<ModelChatTemplate> LoadModelChatTemplate(const std::string& model,
                                                        const std::string& template_file = "");

}  // namespace saturn
