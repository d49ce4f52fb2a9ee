// The seam to the server's diagnosis of a run's time window. The diagnostics service
// (saturn.v1.Diagnostics, GetDiagnostics(window)) is not in the API yet: until it is,
// FetchDiagnosis answers UNIMPLEMENTED and the reports say "not available" with the reason.
// Phase 2 fills in the body; the callers and the report fields do not change.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "clients/connection.h"

namespace saturn::clients {

// A run's window on one server's steady clock (microseconds, the clock of the final
// messages' timings and the engine's step records).
struct ServerWindow {
  size_t target_index = 0;  // into Connection::targets()
  std::string peer;         // as gRPC reported it
  int64_t start_us = 0;     // earliest arrival of a measured request
  int64_t end_us = 0;       // latest finish of a measured request
};

// The diagnosis of `window` as JSON text, or the reason there is none.
absl::StatusOr<std::string> FetchDiagnosis(const Connection& conn, const ServerWindow& window,
                                           double timeout_s);

}  // namespace saturn::clients
