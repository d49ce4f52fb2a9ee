// Human-readable and JSON renderings of the Diagnostics protos for the clients: the server
// info page (saturn-diag info), the full report (get, watch), the tracked outcome after an
// applied action (apply), and the three-line summary saturn-load prints under each phase.
// Pure formatting: never talks to a server, never writes to stdout.
//
// Figures follow docs/DIAGNOSTICS.md. The full report shows shares as percentages; the short
// summary prints every number with "%.2f" (or as an integer) straight from a proto field, so
// saturn-load's check that each figure of its table is in its JSON file holds.
#pragma once

#include <string>
#include <vector>

#include "google/protobuf/message.h"
#include "saturn/v1/diagnostics.pb.h"
#include "saturn/v1/saturn.pb.h"

namespace saturn::clients {

// BOTTLENECK_MEMORY_BOUND -> "MEMORY_BOUND"; UNKNOWN reads "UNKNOWN (no steps)".
std::string BottleneckName(v1::Bottleneck b);

// 4.56e10, "FLOP/s" -> "45.6 GFLOP/s" (SI prefixes k..P; 3 significant digits).
std::string FormatSi(double value, const std::string& unit);

// The proto as JSON (field names as in the .proto, defaults printed). `pretty`: indented.
std::string ProtoJson(const google::protobuf::Message& m, bool pretty);

// "raise max_num_seqs 4 -> 48: 120.0 -> 300.0 tok/s, TPOT 8.00 -> 12.00 ms".
std::string ActionLine(const v1::PlanAction& a);

// saturn-diag get / watch: verdict, signals table, profile lines, per-class table, plan
// table with predictions and trade-offs, tracked outcome.
std::string RenderReport(const v1::DiagnosticsReport& r);

// Measured beside predicted after an applied plan action.
std::string RenderTracked(const v1::TrackedOutcome& t);

// saturn-diag info. `calibration` may be null (then `calibration_note` says why).
std::string RenderInfo(const v1::ServerInfo& info, const v1::Calibration* calibration,
                       const std::string& calibration_note);
std::string RenderCalibration(const v1::Calibration& c);

// saturn-load: verdict, the crossed signals, the top plan action; one line each, without
// the trailing newline. Every number is a proto field printed "%.2f" or as an integer.
std::vector<std::string> ShortDiagnosis(const v1::DiagnosticsReport& r);

}  // namespace saturn::clients
