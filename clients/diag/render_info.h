// saturn-diag info's page and the calibration block it shares with recalibrate. The report
// itself renders through proto/render/report_text.h. Pure formatting: never talks to a
// server, never writes to stdout.
#pragma once

#include <string>

#include "saturn/v1/diagnostics.pb.h"
#include "saturn/v1/saturn.pb.h"

namespace saturn::clients {

// saturn-diag info. `calibration` may be null (then `calibration_note` says why).
std::string RenderInfo(const v1::ServerInfo& info, const v1::Calibration* calibration,
                       const std::string& calibration_note);
std::string RenderCalibration(const v1::Calibration& c);

}  // namespace saturn::clients
