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

#include "server/http/openai_protocol.h"
#include "server/request_intake.h"
#include "tests/fuzz/fuzz_request_limits.h"

namespace {

// An error as openai_http.cc answers it: 400 with a JSON body naming the error.
void CheckAnswered(const absl::Status& status) {
  if (status.code() != absl::StatusCode::kInvalidArgument) std::abort();
  const absl::Status api = saturn::InApiTerms(status);
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
  const saturn::PromptLimits limits = saturn::fuzz::LimitsFor(size);
  absl::StatusOr<saturn::ConvertedRequest> converted =
      saturn::ToEngineRequest(parsed->generate, limits, 7);
  if (!converted.ok()) {
    CheckAnswered(converted.status());
    return 0;
  }
  const absl::Status valid = saturn::ValidateRequest(converted->request, saturn::fuzz::kModel);
  if (!valid.ok()) {
    CheckAnswered(valid);
    return 0;
  }
  saturn::fuzz::CheckAccepted(converted->request);
  return 0;
}
