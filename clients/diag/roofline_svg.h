// The calibrated roofline of a diagnostics report as a hand-written SVG document: log-log
// axes (arithmetic intensity in FLOP/byte against FLOP/s), the bandwidth slope and the
// compute ceiling from the report's calibration with the ridge point marked, the window's op
// classes as labelled points, the whole window as one point, and each step (the report's
// step_points) as a small dot. A title names the device and the verdict.
//
// Pure: builds a string, never writes files. The output is well-formed XML (text escaped,
// every element closed) and stands alone (no scripts, no external fonts or styles).
#pragma once

#include <string>

#include "saturn/v1/diagnostics.pb.h"

namespace saturn::clients {

struct RooflineOptions {
  int width = 900;
  int height = 580;
  // Shown in the title when the calibration names no device.
  std::string device_fallback;
};

std::string RooflineSvg(const v1::DiagnosticsReport& report, const RooflineOptions& options = {});

// "&<>\"'" -> "&amp;&lt;&gt;&quot;&apos;" (exposed for tests).
std::string XmlEscape(const std::string& text);

}  // namespace saturn::clients
