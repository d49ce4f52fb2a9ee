// The one JSON form of the Diagnostics protos: protobuf JSON with the field names of the
// .proto and every field printed, defaults included. A DiagnosticsReport is printed without
// its `json` field (that field holds this form). The server's `json` field, saturn-diag
// get / watch --json, saturn-load's stored diagnosis and saturn-bench-plan's before/after
// all use ReportJson. Depends on the generated proto code only; thread-safe.
#pragma once

#include <string>

#include "google/protobuf/message.h"
#include "saturn/v1/diagnostics.pb.h"

namespace saturn {

// Any message as JSON (field names as in the .proto, defaults printed). `pretty`: indented.
std::string ProtoJson(const google::protobuf::Message& m, bool pretty);

// The report as JSON: ProtoJson of `r` without its `json` field.
std::string ReportJson(const v1::DiagnosticsReport& r, bool pretty);

}  // namespace saturn
