// Fuzz target: a POST /v1/completions body as the HTTP front receives it, through
// ParseCompletionRequest, ToEngineRequest and the engine's ValidateRequest (openai_http.cc's
// order). Whatever the bytes, the result is a value or INVALID_ARGUMENT, never a crash; an
// accepted request fits the limits, and every error reads in the API's terms (InApiTerms) with
// an HTTP status of 400 and an OpenAI error body that is JSON.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <nlohmann/json.hpp>
#include <string_view>
#include <utility>
#include <vector>

#include "server/http/openai_protocol.h"
#include "server/request_intake.h"
#include "tests/fuzz/fuzz_request_limits.h"

namespace {

// An error as openai_http.cc answers it (`prompt_index`: InApiTerms'): 400 with a JSON body
// naming the error.
void CheckAnswered(const absl::Status& status, int prompt_index = -1) {
  if (status.code() != absl::StatusCode::kInvalidArgument) std::abort();
  const absl::Status api = saturn::InApiTerms(status, prompt_index);
  if (saturn::HttpStatus(api) != 400) std::abort();
  const nlohmann::json body = nlohmann::json::parse(saturn::ErrorJson(api), nullptr, false);
  if (body.is_discarded() || !body.contains("error")) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  absl::StatusOr<saturn::CompletionRequest> parsed =
      saturn::ParseCompletionRequest(std::string_view(reinterpret_cast<const char*>(data), size));
  if (!parsed.ok()) {
    CheckAnswered(parsed.status());
    return 0;
  }
  if (parsed->stop.size() > static_cast<size_t>(saturn::kMaxStopStrings)) std::abort();
  for (const std::string& s : parsed->stop) {
    if (s.empty() || s.size() > static_cast<size_t>(saturn::kMaxStopStringBytes)) std::abort();
  }
  if (parsed->requests.empty() ||
      parsed->requests.size() > static_cast<size_t>(saturn::kMaxPrompts)) {
    std::abort();
  }
  const saturn::PromptLimits limits = saturn::fuzz::LimitsFor(size);
  const int n = static_cast<int>(parsed->requests.size());
  // Every prompt converted, then each submitted (validated), as the handler does.
  std::vector<saturn::GenerateRequest> requests;
  for (int i = 0; i < n; ++i) {
    absl::StatusOr<saturn::ConvertedRequest> converted =
        saturn::ToEngineRequest(parsed->requests[i], limits, 7);
    if (!converted.ok()) {
      CheckAnswered(converted.status(), n > 1 ? i : -1);
      return 0;
    }
    requests.push_back(std::move(converted->request));
  }
  for (int i = 0; i < n; ++i) {
    const absl::Status valid = saturn::ValidateRequest(requests[i], saturn::fuzz::kModel);
    if (!valid.ok()) {
      CheckAnswered(valid, n > 1 ? i : -1);
      return 0;
    }
    saturn::fuzz::CheckAccepted(requests[i]);
  }
  return 0;
}
