// Fuzz target: a chat template as a model file or --chat_template hands it to the server
// (engine/tokenizer/chat_template.h), parsed and rendered with a fixed conversation. Whatever the
// bytes, Parse and Render give a value or INVALID_ARGUMENT (never a crash, a hang or an
// unbounded output), and a render stays within kMaxOutputBytes.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "engine/tokenizer/chat_template.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  absl::StatusOr<saturn::ChatTemplate> t =
      saturn::ChatTemplate::Parse(std::string(reinterpret_cast<const char*>(data), size));
  if (!t.ok()) {
    if (t.status().code() != absl::StatusCode::kInvalidArgument) std::abort();
    return 0;
  }
  const std::vector<saturn::ChatMessage> messages = {
      {"system", "be brief"}, {"user", "hi"}, {"assistant", "hello"}, {"user", "\xc3\xa9 <b>"}};
  for (bool generation_prompt : {false, true}) {
    absl::StatusOr<std::string> out = t->Render(messages, generation_prompt, "<s>", "</s>");
    if (!out.ok() && out.status().code() != absl::StatusCode::kInvalidArgument) std::abort();
    if (out.ok() && out->size() > saturn::ChatTemplate::kMaxOutputBytes) std::abort();
  }
  return 0;
}
