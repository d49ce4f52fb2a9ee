// The calibrated roofline of a diagnostics report as a hand-written SVG document: log-log
// axes (arithmetic intensity in FLOP/byte against FLOP/s), the bandwidth slope and the
// compute ceiling from the report's calibration with the ridge point marked, the window's op
// classes as labelled points, the whole window as one point, and each step (the report's
// step_points) as a small dot. A title names the device and the verdict; a title or subtitle
// too wide for the document is wrapped (and the title's font shrunk) by an estimate of its
// rendered width, so that no text runs off an edge.
//
// Pure: builds a string, never writes files. The output is well-formed XML (text escaped,
// every element closed) and stands alone (no scripts, no external fonts or styles).
#pragma once

#include <string>
#include <vector>

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

// The estimated rendered width in pixels of `text` (UTF-8) at `font_size` px: Helvetica's
// (and Arial's, which shares its metrics) advance widths, regular or bold, plus 20 % for the
// wider sans-serif fonts a viewer may substitute (DejaVu Sans: a title of 800 px in Helvetica
// Bold took about 930); a character outside ASCII counts as one em. An estimate: no font is
// loaded (exposed for tests).
double EstimateTextWidth(const std::string& text, double font_size, bool bold);

// `text` cut into lines whose estimated width is at most `max_width`: greedily at spaces (the
// spaces at the cuts dropped), a word wider than a line cut between characters. Joining the
// lines with single spaces gives `text` back when every cut is at a single space.
std::vector<std::string> WrapText(const std::string& text, double font_size, bool bold,
                                  double max_width);

}  // namespace saturn::clients
