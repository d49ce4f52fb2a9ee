// Fuzz target: the bytes of a saturn.v1.UpdateEngineOptionsRequest through the raw parse and
// MergeOptions. INVALID_ARGUMENT or a merged value, never a crash; unset fields keep the
// current options.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "server/grpc/proto_convert.h"
#include "server/grpc/raw_message.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  saturn::v1::UpdateEngineOptionsRequest req;
  const absl::Status parsed =
      saturn::ParseRequest(std::string_view(reinterpret_cast<const char*>(data), size), &req);
  if (!parsed.ok()) {
    if (parsed.code() != absl::StatusCode::kInvalidArgument) std::abort();
    return 0;
  }
  saturn::EngineOptions current;
  current.max_num_seqs = 17;
  current.max_num_batched_tokens = 333;
  const saturn::EngineOptions merged = saturn::MergeOptions(current, req);
  if (!req.has_max_num_seqs() && merged.max_num_seqs != 17) std::abort();
  if (!req.has_max_num_batched_tokens() && merged.max_num_batched_tokens != 333) std::abort();
  if (req.has_max_num_seqs() && merged.max_num_seqs != req.max_num_seqs()) std::abort();
  return 0;
}
