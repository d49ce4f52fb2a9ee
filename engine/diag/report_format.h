// Renderings of a DiagnosticsReport for the clients: JSON (--json; field names are the
// struct's, rates in base units: tokens/s, FLOP/s, bytes/s, shares in [0, 1]) and a compact
// human-readable text (a few aligned lines and the plan table). Pure.
#pragma once

#include <string>

#include "engine/diag/analyzer.h"

namespace saturn {

std::string ReportToJson(const DiagnosticsReport& r, int indent = 2);
std::string ReportToText(const DiagnosticsReport& r);

}  // namespace saturn
