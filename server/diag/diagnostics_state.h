// What the diagnostics side of the server keeps while it runs: the diagnostics session
// (engine/diag/diagnostics_session.h: calibration in force, probe steps, reports, plan
// tracking) started from the server's flags, the request-level metrics fed by the Generate
// streams, and the device's own busy figure sampled over time. Never touches gRPC. Owned by
// ServerApp, which outlives every call and the metrics endpoint.
#pragma once

#include <memory>

#include "absl/status/status.h"
#include "engine/diag/diagnostics_session.h"
#include "engine/engine.h"
#include "server/diag/request_metrics.h"
#include "server/diag/utilization_sampler.h"
#include "server/server_config.h"

namespace saturn {

class DiagnosticsState {
 public:
  DiagnosticsState() = default;
  DiagnosticsState(const DiagnosticsState&) = delete;
  DiagnosticsState& operator=(const DiagnosticsState&) = delete;

  // Starts the session: measures the backend's ceilings (--calibration=measure|quick) or loads
  // them (--calibration=file), saves them when --save_calibration is set, then times the probe
  // steps (--probe_steps_ms). Call once, after Engine::Create and before serving. Errors name
  // the flag.
  absl::Status InitCalibration(Engine* engine, const ServerConfig& config);

  DiagnosticsSession& session() { return session_; }
  const DiagnosticsSession& session() const { return session_; }
  RequestMetrics* request_metrics() { return &request_metrics_; }

  // Samples the device's own busy figure (NVML's utilization.gpu) every 200 ms where the
  // backend has one (server/diag/utilization_sampler.h); call once, before the engine serves.
  // StopSampling before the engine goes.
  void StartSampling(const Engine* engine);
  void StopSampling();
  // That figure averaged over [begin_us, end_us], as a percentage; -1 without readings.
  double device_utilization_percent(double begin_us, double end_us) const;

 private:
  DiagnosticsSession session_{"saturn-server"};
  RequestMetrics request_metrics_;
  std::unique_ptr<UtilizationSampler> utilization_;  // set once by StartSampling, never reset
};

}  // namespace saturn
