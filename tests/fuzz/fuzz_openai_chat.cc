// Fuzz target: a POST /v1/chat/completions body as the HTTP front receives it, through
// ParseChatRequest. Whatever the bytes, the result is a request or INVALID_ARGUMENT with an HTTP
// status of 400 and an OpenAI error body that is JSON; an accepted one holds 1 to kMaxMessages
// messages, each with a role, and exactly one request whose prompt is still unset (the template
// renders it).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string_view>

#include "server/http/openai_protocol.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  absl::StatusOr<saturn::ChatRequest> parsed =
      saturn::ParseChatRequest(std::string_view(reinterpret_cast<const char*>(data), size));
  if (!parsed.ok()) {
    if (parsed.status().code() != absl::StatusCode::kInvalidArgument) std::abort();
    if (saturn::HttpStatus(parsed.status()) != 400) std::abort();
    const nlohmann::json body =
        nlohmann::json::parse(saturn::ErrorJson(parsed.status()), nullptr, false);
    if (body.is_discarded() || !body.contains("error")) std::abort();
    return 0;
  }
  if (parsed->messages.empty() ||
      parsed->messages.size() > static_cast<size_t>(saturn::kMaxMessages)) {
    std::abort();
  }
  for (const saturn::ChatMessage& m : parsed->messages) {
    if (m.role.empty() || m.role.size() > 64) std::abort();
  }
  if (parsed->completion.requests.size() != 1) std::abort();
  const auto& g = parsed->completion.requests[0];
  if (!g.prompt_text().empty() || g.prompt_token_ids_size() != 0) std::abort();
  return 0;
}
