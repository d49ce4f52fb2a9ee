// The whole input of one diagnostics report, and its file form. A live engine's input is
// captured by DiagnosticsSession::Capture; `saturn-diag record` writes it with the calibration
// and the server's own verdict as JSON, and `saturn-diag analyze` judges it offline with the
// same session: the same input gives the same report.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/diag/analyzer.h"
#include "engine/measure/calibration.h"
#include "engine/measure/step_record.h"

namespace saturn {

struct WindowInput {
  double begin_us = 0;  // the window asked (steady clock of the server)
  double end_us = 0;
  // The ring's newest records from a few steps before begin_us (oldest first), without their
  // per-op records (only traces read those).
  std::vector<StepRecord> steps;
  // Where the records start after begin_us: the sums of the window's older steps that the ring
  // evicted (StepRing::WindowWithEvicted; empty otherwise).
  EvictedSums earlier;
  int64_t ring_total_steps = 0;   // steps the ring has seen since the engine started
  size_t ring_capacity = 0;       // records it keeps
  double in_flight_since_us = 0;  // start of a step still running at capture (0: none)
  AnalyzerContext context;        // the engine's state at capture (run_share included)

  // The ring's questions, answered from the capture.
  std::vector<StepRecord> Since(double since_us) const;  // start_us >= since_us
  std::vector<StepRecord> Last(size_t n) const;
};

struct Recording {
  static constexpr int kVersion = 1;
  WindowInput input;
  Calibration calibration;
  double nvml_percent = -1;  // the device's own busy figure over the window (-1: none)
  std::string device;        // backend and device, for a reader
  // The server's verdict on this input when it was recorded ("" where unknown): analyze says
  // whether it judges the same.
  std::string bottleneck;
  std::string top_action;
};

std::string RecordingToJson(const Recording& r);
// Errors name the field that is missing or malformed.
absl::StatusOr<Recording> RecordingFromJson(std::string_view text);

}  // namespace saturn
