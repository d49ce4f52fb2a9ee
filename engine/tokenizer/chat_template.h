// A model's chat template (Hugging Face tokenizer_config.json `chat_template`, a
// chat_template.jinja file, or GGUF `tokenizer.chat_template`) parsed once and rendered per
// request, as transformers' apply_chat_template renders it: Python jinja2 in an immutable sandbox
// with trim_blocks and lstrip_blocks on, keep_trailing_newline off, the loopcontrols extension
// (break/continue), and the globals raise_exception, strftime_now, range, namespace and dict;
// tojson is transformers' own (json.dumps with ensure_ascii=False, no HTML escaping).
//
// Only the Jinja subset that chat templates use is implemented; anything else is refused at
// Parse with its line and column, never silently rendered differently. Parse and Render never
// throw, crash or hang: source size, nesting depth, loop iterations, macro recursion and output
// size are all bounded, and each bound is an INVALID_ARGUMENT naming it.
//
// Immutable after Parse: Render is const and thread-safe; copies share the parsed program.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace saturn {

struct ChatMessage {
  std::string role;
  std::string content;
};

class ChatTemplate {
 public:
  // Bounds that keep hostile templates from exhausting the server.
  static constexpr size_t kMaxSourceBytes = 1 << 20;
  static constexpr int kMaxNesting = 64;  // block statements, and brackets within one expression
  static constexpr size_t kMaxOutputBytes = 4 << 20;     // also any one string or list built
  static constexpr long kMaxLoopIterations = 1'000'000;  // all loops of one render together

  // Parses `source`. Errors are INVALID_ARGUMENT of the form
  //   "chat_template line 3, column 12: filter 'foo' is not supported".
  static absl::StatusOr<ChatTemplate> Parse(std::string source);

  // Renders the template with the variables apply_chat_template passes: `messages` (a list of
  // {role, content} dicts), `add_generation_prompt`, `bos_token`, `eos_token`, `tools` and
  // `documents` (both None), plus `extra` string variables (other special tokens such as
  // `unk_token`, or template kwargs such as `date_string`). raise_exception('msg') in the template
  // gives INVALID_ARGUMENT whose message is exactly msg; other runtime errors name the line and
  // column and what failed ("chat_template line 4, column 8: 'foo' is undefined").
  absl::StatusOr<std::string> Render(
      const std::vector<ChatMessage>& messages, bool add_generation_prompt,
      const std::string& bos_token, const std::string& eos_token,
      const std::vector<std::pair<std::string, std::string>>& extra = {}) const;

  struct Program;  // the parsed template (chat_template_internal.h)

 private:
  explicit ChatTemplate(std::shared_ptr<const Program> program) : program_(std::move(program)) {}
  std::shared_ptr<const Program> program_;
};

}  // namespace saturn
