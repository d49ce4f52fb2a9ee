// Fuzz target: the bytes of a saturn.v1.GenerateRequest as the server receives them, through
// the whole server-side check (raw parse, ToEngineRequest, the engine's ValidateRequest).
// Whatever the bytes, the result is a value or INVALID_ARGUMENT, never a crash; an accepted
// request fits the limits.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string_view>

#include "server/grpc/raw_message.h"
#include "server/request_intake.h"
#include "tests/fuzz/fuzz_request_limits.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  saturn::v1::GenerateRequest req;
  const absl::Status parsed =
      saturn::ParseRequest(std::string_view(reinterpret_cast<const char*>(data), size), &req);
  if (!parsed.ok()) {
    if (parsed.code() != absl::StatusCode::kInvalidArgument) std::abort();
    return 0;
  }
  const saturn::PromptLimits limits = saturn::fuzz::LimitsFor(size);
  absl::StatusOr<saturn::ConvertedRequest> converted = saturn::ToEngineRequest(req, limits, 7);
  if (!converted.ok()) {
    if (converted.status().code() != absl::StatusCode::kInvalidArgument) std::abort();
    return 0;
  }
  const absl::Status valid = saturn::ValidateRequest(converted->request, saturn::fuzz::kModel);
  if (valid.ok()) {
    saturn::fuzz::CheckAccepted(converted->request);
  } else if (valid.code() != absl::StatusCode::kInvalidArgument) {
    std::abort();
  }
  return 0;
}
