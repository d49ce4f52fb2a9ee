// What the diagnostics side of the server keeps while it runs: the calibration measured (or
// loaded) at start, the plans of the latest reports, the PlanTracker that closes the loop when
// UpdateEngineOptions applies one of their actions, and the request-level metrics fed by the
// Generate streams. Builds reports; never touches gRPC. Thread-safe (one mutex around the
// recent plans; the tracker and metrics lock themselves). Owned by ServerApp, which outlives
// every call and the metrics endpoint.
#pragma once

#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "engine/calibration.h"
#include "engine/calibration_trials.h"
#include "engine/diag/analyzer.h"
#include "engine/diag/plan_tracker.h"
#include "engine/engine.h"
#include "server/request_metrics.h"
#include "server/server_config.h"
#include "server/utilization_sampler.h"

namespace saturn {

class DiagnosticsState {
 public:
  DiagnosticsState() = default;
  DiagnosticsState(const DiagnosticsState&) = delete;
  DiagnosticsState& operator=(const DiagnosticsState&) = delete;

  // Measures the backend's ceilings (--calibration=measure) or loads them
  // (--calibration=file), then saves them when --save_calibration is set. Call once, after
  // Engine::Create and before serving (measuring runs on the engine thread: Engine::Calibrate).
  // Errors name the flag.
  absl::Status InitCalibration(Engine* engine, const ServerConfig& config);
  // Measures the ceilings again on the engine thread between two steps (Engine::Calibrate:
  // the engine pauses for it, so the device is otherwise idle), replaces the calibration in force
  // and clears the suspect flag. Errors: UNAVAILABLE while shutting down, the backend's errors.
  absl::StatusOr<Calibration> Recalibrate(Engine* engine);
  // Times synthetic probe steps (Engine::ProbeSteps, --probe_steps_ms) so plans have
  // measured step times beyond the served shapes. Run by InitCalibration and Recalibrate; a
  // failure is logged and the plans fall back to the window's own steps.
  void ProbeSteps(Engine* engine);
  // After UpdateEngineOptions applied `after`: probes what it opened that the probe has not
  // measured (longer prefill chunks when max_num_batched_tokens widened, decode steps when
  // cuda_graphs switched; engine/step_probe.h ReprobeAfter), within --probe_steps_ms. Serving
  // pauses for it as for the start-up probe.
  void ReprobeAfterOptions(Engine* engine, const EngineOptions& before, const EngineOptions& after);
  // Nullopt before InitCalibration succeeded.
  std::optional<Calibration> calibration() const;
  // Wall time measuring took (0 when loaded from a file).
  double calibration_ms() const;
  // Seconds since the calibration in force was measured (-1: unknown, e.g. an old file).
  double calibration_age_s() const;
  // Set when a report found an achieved rate above a ceiling (self-check); cleared by
  // Recalibrate. `reason` gets the first note.
  bool calibration_suspect(std::string* reason = nullptr) const;

  // One report over steps fully inside [begin_us, end_us] (steady clock), with the tracked
  // outcome of an applied action; remembers its plan. `steps_out` (optional) receives the
  // window's steps. Requires a calibration (an empty one otherwise).
  DiagnosticsReport BuildReport(const Engine& engine, double begin_us, double end_us,
                                std::vector<StepRecord>* steps_out = nullptr);

  // Called after UpdateEngineOptions applied `after` (was `before`) at `applied_us`. When
  // `after` equals the options of an action of a recent plan, the tracker starts measuring
  // it; any other real change stops tracking (its prediction no longer applies).
  void OnOptionsApplied(const EngineOptions& before, const EngineOptions& after, double applied_us);
  bool tracking() const { return tracker_.has_action(); }

  RequestMetrics* request_metrics() { return &request_metrics_; }

  // Samples the device's own busy figure (NVML's utilization.gpu) every 200 ms where the
  // backend has one (server/utilization_sampler.h); call once, before the engine serves.
  // StopSampling before the engine goes.
  void StartSampling(const Engine* engine);
  void StopSampling();
  // That figure averaged over [begin_us, end_us], as a percentage; -1 without readings.
  double device_utilization_percent(double begin_us, double end_us) const;

 private:
  StepProbeOptions ProbeOptions(const Engine& engine) const;
  // Runs `o` and logs what the probe now covers (`why` names a re-probe's reason).
  void RunProbe(Engine* engine, const StepProbeOptions& o, const std::string& why);

  struct RecentPlan {
    Plan plan;
    StepModel model;
    AnalyzerContext ctx;
  };
  static constexpr size_t kRecentPlans = 8;

  mutable std::mutex mu_;
  std::optional<Calibration> calibration_;  // guarded by mu_
  double calibration_ms_ = 0;               // guarded by mu_
  double probe_ms_ = 0;                     // probe budget (set once by InitCalibration)
  bool suspect_ = false;                    // guarded by mu_
  SchedTimes last_sched_;                   // guarded by mu_: at the previous report
  std::string suspect_reason_;              // guarded by mu_
  std::deque<RecentPlan> recent_;           // newest first; guarded by mu_
  PlanTracker tracker_;
  RequestMetrics request_metrics_;
  std::unique_ptr<UtilizationSampler> utilization_;  // set once by StartSampling, never reset
};

}  // namespace saturn
