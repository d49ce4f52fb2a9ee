// Diagnostics RPC checks and report building. Messages name the proto field and the limit.
#include "server/diag/diagnostics_request.h"

#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/diag/recording.h"
#include "proto/render/report_proto.h"

namespace saturn {

absl::StatusOr<double> ResolveWindowSeconds(double window_seconds) {
  if (window_seconds == 0) return kDefaultWindowSeconds;
  if (!std::isfinite(window_seconds) || window_seconds < 0 || window_seconds > kMaxWindowSeconds) {
    return absl::InvalidArgumentError(
        absl::StrFormat("window_seconds: must be in (0, %g] (0: %g), got %g", kMaxWindowSeconds,
                        kDefaultWindowSeconds, window_seconds));
  }
  return window_seconds;
}

absl::StatusOr<DiagWindow> ResolveWindow(const v1::GetDiagnosticsRequest& req, double now_us) {
  const double b = req.window_begin_us(), e = req.window_end_us();
  if (b == 0 && e == 0) {
    absl::StatusOr<double> s = ResolveWindowSeconds(req.window_seconds());
    if (!s.ok()) return s.status();
    return DiagWindow{now_us - *s * 1e6, now_us};
  }
  if (req.window_seconds() != 0) {
    return absl::InvalidArgumentError(
        "window_seconds: set either window_seconds or window_begin_us/window_end_us, not both");
  }
  if (!std::isfinite(b) || b <= 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "window_begin_us: must be a positive server timestamp (set with window_end_us), got %g",
        b));
  }
  if (!std::isfinite(e) || e <= b) {
    return absl::InvalidArgumentError(
        absl::StrFormat("window_end_us: must be greater than window_begin_us %.16g, got %g", b, e));
  }
  if (e > now_us + kFutureSlackUs) {
    return absl::InvalidArgumentError(
        absl::StrFormat("window_end_us: %.16g is more than %g s past the server's now %.16g", e,
                        kFutureSlackUs / 1e6, now_us));
  }
  if (e - b > kMaxWindowSeconds * 1e6) {
    return absl::InvalidArgumentError(
        absl::StrFormat("window_end_us - window_begin_us: at most %g s, got %.1f s",
                        kMaxWindowSeconds, (e - b) / 1e6));
  }
  return DiagWindow{b, std::min(e, now_us)};
}

absl::StatusOr<int> ResolveIntervalMs(int interval_ms) {
  if (interval_ms == 0) return kDefaultIntervalMs;
  if (interval_ms < kMinIntervalMs || interval_ms > kMaxIntervalMs) {
    return absl::InvalidArgumentError(
        absl::StrFormat("interval_ms: must be in [%d, %d] (0: %d), got %d", kMinIntervalMs,
                        kMaxIntervalMs, kDefaultIntervalMs, interval_ms));
  }
  return interval_ms;
}

absl::StatusOr<size_t> ResolveTraceSteps(int max_steps, size_t ring_capacity) {
  if (max_steps == 0) return std::min<size_t>(kDefaultTraceSteps, ring_capacity);
  if (max_steps < 0 || static_cast<size_t>(max_steps) > ring_capacity) {
    return absl::InvalidArgumentError(
        absl::StrFormat("max_steps: must be in [1, %d] (the step ring's capacity; 0: %d), got %d",
                        ring_capacity, kDefaultTraceSteps, max_steps));
  }
  return static_cast<size_t>(max_steps);
}

absl::Status ValidateStepPoints(int max_step_points) {
  if (max_step_points < 0 || max_step_points > kMaxStepPoints) {
    return absl::InvalidArgumentError(absl::StrFormat("max_step_points: must be in [0, %d], got %d",
                                                      kMaxStepPoints, max_step_points));
  }
  return absl::OkStatus();
}

bool FillCalibration(const DiagnosticsSession& diag, v1::Calibration* out) {
  const std::optional<Calibration> cal = diag.calibration();
  if (!cal.has_value()) return false;
  ToProto(*cal, diag.calibration_ms(), out);
  out->set_age_s(diag.calibration_age_s());
  std::string reason;
  out->set_suspect(diag.calibration_suspect(&reason));
  out->set_suspect_reason(reason);
  return true;
}

void FillReport(const Engine& engine, DiagnosticsState* diag, const DiagWindow& window,
                const ReportContent& content, v1::DiagnosticsReport* out) {
  DiagnosticsSession& session = diag->session();
  std::vector<StepRecord> steps;
  const WindowInput input = session.Capture(engine, window.begin_us, window.end_us);
  const DiagnosticsReport r = session.BuildReport(input, &steps);
  ReportProtoOptions o;
  o.include_json = content.include_json;
  o.max_step_points = content.max_step_points;
  o.nvml_utilization = diag->device_utilization_percent(window.begin_us, window.end_us);
  ToProto(r, steps, o, out);
  if (content.include_recording) {
    Recording rec;
    rec.input = input;
    rec.calibration = session.calibration().value_or(Calibration{});
    rec.nvml_percent = o.nvml_utilization;
    const EngineInfo info = engine.info();
    rec.device = absl::StrCat(info.backend, ": ", info.device_name);
    rec.bottleneck = BottleneckName(r.verdict.bottleneck);
    rec.top_action = r.plan.actions.empty() ? "" : r.plan.actions.front().what;
    out->set_recording_json(RecordingToJson(rec));
  }
}

}  // namespace saturn
