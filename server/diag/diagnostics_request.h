// The checks and the work behind each Diagnostics RPC, apart from gRPC plumbing: window and
// interval validation (INVALID_ARGUMENT naming the field and its limit), building a report
// proto for a window, and NVML's utilization where the build and backend have it. Pure except
// for reading the engine and the clock passed in. Thread-safe.
#pragma once

#include <cstddef>

#include "absl/status/statusor.h"
#include "engine/engine.h"
#include "saturn/v1/diagnostics.pb.h"
#include "server/diag/diagnostics_state.h"

namespace saturn {

constexpr double kDefaultWindowSeconds = 10;
constexpr double kMaxWindowSeconds = 3600;
constexpr int kDefaultIntervalMs = 1000;
constexpr int kMinIntervalMs = 100;
constexpr int kMaxIntervalMs = 3600 * 1000;
constexpr int kMaxStepPoints = 10000;
constexpr int kDefaultTraceSteps = 200;
// How far past the server's now an explicit window may end (clock skew between a client's
// reading of server timestamps and this call); the end is clamped to now.
constexpr double kFutureSlackUs = 1e6;

struct DiagWindow {
  double begin_us = 0;
  double end_us = 0;
};

// GetDiagnostics: window_seconds (0: the default) ending at `now_us`, or the explicit
// [window_begin_us, window_end_us].
absl::StatusOr<DiagWindow> ResolveWindow(const v1::GetDiagnosticsRequest& req, double now_us);
// window_seconds of a watch (0: the default), and interval_ms (0: the default).
absl::StatusOr<double> ResolveWindowSeconds(double window_seconds);
absl::StatusOr<int> ResolveIntervalMs(int interval_ms);
// max_steps (0: the default) against the ring's capacity.
absl::StatusOr<size_t> ResolveTraceSteps(int max_steps, size_t ring_capacity);
absl::Status ValidateStepPoints(int max_step_points);

// The calibration in force as GetServerInfo and Recalibrate return it: the figures, how
// long measuring took, its age and the self-check's suspect flag. False when none yet.
bool FillCalibration(const DiagnosticsSession& diag, v1::Calibration* out);

// What a report carries beyond the verdict (GetDiagnosticsRequest's fields).
struct ReportContent {
  bool include_json = false;
  int max_step_points = 0;
  bool include_recording = false;  // the report's whole input (engine/diag/recording.h)
};

// One report over `window` as the RPCs return it.
void FillReport(const Engine& engine, DiagnosticsState* diag, const DiagWindow& window,
                const ReportContent& content, v1::DiagnosticsReport* out);

}  // namespace saturn
