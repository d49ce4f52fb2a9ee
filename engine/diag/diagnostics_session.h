// One diagnostics session: the calibration in force, the probe steps' budget, the window rule,
// the analysis, and the plan -> applied -> tracked loop. The server's Diagnostics service and
// saturn-bench-plan drive the same session, so a bench measures the server's own judgement;
// `saturn-diag analyze` runs it on a recording (recording.h) without an engine.
// Thread-safe (one mutex around the calibration and the recent plans; the tracker locks itself).
#pragma once

#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/diag/analyzer.h"
#include "engine/diag/plan_tracker.h"
#include "engine/diag/recording.h"
#include "engine/engine.h"
#include "engine/measure/calibration.h"
#include "engine/measure/calibration_trials.h"
#include "engine/measure/step_probe.h"

namespace saturn {

// Where the ceilings come from: measured by the engine's backend (quick: shorter trials), or
// given (a file the caller loaded). `probe_ms` budgets the probe steps that follow.
struct CalibrationSource {
  std::optional<Calibration> given;
  bool quick = false;
  double probe_ms = kDefaultProbeBudgetMs;
};

class DiagnosticsSession {
 public:
  // `log_name` prefixes the session's log lines on stderr ("saturn-server").
  explicit DiagnosticsSession(std::string log_name = "saturn-server")
      : log_name_(std::move(log_name)) {}
  DiagnosticsSession(const DiagnosticsSession&) = delete;
  DiagnosticsSession& operator=(const DiagnosticsSession&) = delete;

  // Measures (on the engine thread: Engine::Calibrate) or takes the given calibration, then
  // times the probe steps. Call once, after Engine::Create and before serving.
  absl::Status Start(Engine* engine, const CalibrationSource& source);
  // A session without an engine, for recordings: the calibration they carry is in force.
  void StartOffline(const Calibration& calibration);

  // Measures the ceilings again between two steps (the engine pauses), replaces the
  // calibration in force, clears the suspect flag and probes again.
  absl::StatusOr<Calibration> Recalibrate(Engine* engine);
  // After an options change: probes what it opened that the probe has not measured (longer
  // prefill chunks, decode steps with CUDA graphs switched; step_probe.h ReprobeAfter).
  void ReprobeAfterOptions(Engine* engine, const EngineOptions& before, const EngineOptions& after);

  std::optional<Calibration> calibration() const;  // nullopt before Start
  double calibration_ms() const;                   // wall time measuring took (0: given)
  double calibration_age_s() const;                // -1: unknown (an old file)
  // Set when a report found an achieved rate above a ceiling; cleared by Recalibrate.
  bool calibration_suspect(std::string* reason = nullptr) const;

  // What a report over [begin_us, end_us] (steady clock) reads from a live engine: the ring's
  // steps from a few before the window, the engine's state, the CPU contention since the
  // previous capture (schedstat). Each capture moves that contention mark.
  WindowInput Capture(const Engine& engine, double begin_us, double end_us);
  // One report on `input`, with the tracked outcome of an applied action; remembers its plan.
  // `steps_out` (optional) receives the window's steps. The same input gives the same report,
  // live or offline.
  DiagnosticsReport BuildReport(const WindowInput& input,
                                std::vector<StepRecord>* steps_out = nullptr);
  // Capture + BuildReport.
  DiagnosticsReport BuildReport(const Engine& engine, double begin_us, double end_us,
                                std::vector<StepRecord>* steps_out = nullptr);

  // Called after an options change from `before` to `after` at `applied_us`. When `after`
  // equals the options of an action of a recent plan, the tracker measures it from then on;
  // any other real change stops tracking (its prediction no longer applies).
  void OnOptionsApplied(const EngineOptions& before, const EngineOptions& after, double applied_us);
  // Tracks `action` of a recent plan from `applied_us`, as OnOptionsApplied does for a
  // server-side one: a client-side action (more clients) changes no option, so its caller says
  // when it took effect. False when no recent plan holds it, or it is applied by a restart
  // (Action::restart_flags: quantized weights), which no session outlives.
  bool TrackAction(const Action& action, double applied_us);
  bool tracking() const { return tracker_.has_action(); }

 private:
  StepProbeOptions ProbeOptions(const Engine& engine) const;
  void ProbeSteps(Engine* engine);
  void RunProbe(Engine* engine, const StepProbeOptions& o, const std::string& why);

  struct RecentPlan {
    Plan plan;
    StepModel model;
    AnalyzerContext ctx;
  };
  static constexpr size_t kRecentPlans = 8;

  const std::string log_name_;
  mutable std::mutex mu_;
  std::optional<Calibration> calibration_;  // guarded by mu_
  double calibration_ms_ = 0;               // guarded by mu_
  double probe_ms_ = 0;                     // set once by Start
  bool suspect_ = false;                    // guarded by mu_
  std::string suspect_reason_;              // guarded by mu_
  SchedTimes last_sched_;                   // guarded by mu_: at the previous capture
  std::deque<RecentPlan> recent_;           // newest first; guarded by mu_
  PlanTracker tracker_;
};

}  // namespace saturn
