// Closes the loop on a plan: remembers the action that was applied (with the prediction and
// the step model that made it) and, on later windows, measures the steady-state steps after
// the change and states the error. Thread-safe: one mutex around the tracked action.
#pragma once

#include <mutex>
#include <optional>
#include <vector>

#include "engine/diag/analyzer.h"

namespace saturn {

class PlanTracker {
 public:
  // Steps right after the change that are not yet steady state (ramp-up, prefill).
  explicit PlanTracker(int settle_steps = 2, int min_steady_steps = 3)
      : settle_steps_(settle_steps), min_steady_steps_(min_steady_steps) {}

  // Records that `action` (from a plan made with `model` and `ctx`, sequences of mean
  // context `context`, looking up `curve`) took effect at `applied_us` (steady clock, as step
  // records). Without a curve the outcome has no step-time drift.
  void RecordApplied(const Action& action, const StepModel& model, const AnalyzerContext& ctx,
                     double context, double applied_us, const StepCurve& curve = {});
  void Clear();
  bool has_action() const;

  // Compares decode-only steps that started after the change (minus the first
  // settle_steps) with the prediction, and their times with the curve's at the same batch
  // (step_time_drift). Empty when nothing is tracked.
  std::optional<TrackedOutcome> Evaluate(const std::vector<StepRecord>& steps) const;

 private:
  struct Applied {
    Action action;
    StepModel model;
    AnalyzerContext ctx;
    double context = 0;
    double applied_us = 0;
    StepCurve curve;
  };
  const int settle_steps_;
  const int min_steady_steps_;
  mutable std::mutex mu_;
  std::optional<Applied> applied_;  // guarded by mu_
};

}  // namespace saturn
