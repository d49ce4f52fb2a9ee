// The one text rendering of a saturn.v1.DiagnosticsReport: the report's `text` field (the
// server fills it), saturn-diag get / watch, and the tests of the analyzer, all from the
// proto. Verdict and its evidence, signals table, profile lines, per-class table, step model,
// plan table with predictions and trade-offs, tracked outcome; plus the small formatters the
// clients' other renderings share. Depends on the generated proto code only; pure
// formatting, thread-safe.
//
// Figures follow docs/DIAGNOSTICS.md; shares are shown as percentages.
#pragma once

#include <string>

#include "saturn/v1/diagnostics.pb.h"

namespace saturn {

// BOTTLENECK_MEMORY_BOUND -> "MEMORY_BOUND"; UNKNOWN reads "UNKNOWN (no steps)".
std::string BottleneckName(v1::Bottleneck b);

// 4.56e10, "FLOP/s" -> "45.6 GFLOP/s" (SI prefixes k..P; 3 significant digits).
std::string FormatSi(double value, const std::string& unit);

// "raise max_num_seqs 4 -> 48: 120.0 -> 300.0 tok/s, TPOT 8.00 -> 12.00 ms".
std::string ActionLine(const v1::PlanAction& a);

// The full report (a few dozen aligned lines).
std::string RenderReport(const v1::DiagnosticsReport& r);

// Measured beside predicted after an applied plan action.
std::string RenderTracked(const v1::TrackedOutcome& t);

}  // namespace saturn
