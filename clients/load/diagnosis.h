// The server's diagnosis of a run's time window, as saturn-load stores and prints it:
// GetDiagnostics (saturn.v1.Diagnostics) over exactly the window of a phase's measured
// requests, on the server that served them. The stored text is the report's one JSON form
// (proto/render/report_json.h ReportJson: every field of the proto, names as in
// diagnostics.proto). ParseDiagnosis reads it back into the proto for the table's short
// rendering (ShortDiagnosis).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "clients/common/connection.h"
#include "saturn/v1/diagnostics.pb.h"

namespace saturn::clients {

// A run's window on one server's steady clock (microseconds, the clock of the final
// messages' timings and the engine's step records).
struct ServerWindow {
  size_t target_index = 0;  // into Connection::targets()
  std::string peer;         // as gRPC reported it
  int64_t start_us = 0;     // earliest arrival of a measured request
  int64_t end_us = 0;       // latest finish of a measured request
  // When > 0, the window is instead the last last_s seconds before the fetch: for load that
  // went through the HTTP front, whose answers carry no server clock (the span reaches back to
  // the first measured send).
  double last_s = 0;
};

// The diagnosis of `window` as JSON text, or the reason there is none (a server without the
// Diagnostics service answers UNIMPLEMENTED; the message says so and names the target).
absl::StatusOr<std::string> FetchDiagnosis(const Connection& conn, const ServerWindow& window,
                                           double timeout_s);

// The stored JSON text of a report (see above).
std::string DiagnosisJson(const v1::DiagnosticsReport& report);
// Back to the proto (unknown fields are ignored).
absl::StatusOr<v1::DiagnosticsReport> ParseDiagnosis(const std::string& json);

// saturn-load's three lines under a phase: verdict, the crossed signals, the top plan action;
// without the trailing newline. Every number is a proto field printed "%.2f" or as an
// integer, so saturn-load's check that each figure of its table is in its JSON file holds.
std::vector<std::string> ShortDiagnosis(const v1::DiagnosticsReport& r);

}  // namespace saturn::clients
