// Analyze(): profile -> verdict -> step model -> plan (analyzer.h).
#include "engine/diag/analyzer.h"

namespace saturn {

DiagnosticsReport Analyze(const std::vector<StepRecord>& steps, double window_begin_us,
                          double window_end_us, const Calibration& cal, const AnalyzerContext& ctx,
                          const AnalyzerThresholds& th) {
  DiagnosticsReport r;
  r.window_begin_us = window_begin_us;
  r.window_end_us = window_end_us;
  r.calibration = cal;
  r.profile = ComputeProfile(steps, window_begin_us, window_end_us, cal, ctx, th);
  r.verdict = Classify(steps, r.profile, cal, ctx, th);
  r.model = FitStepModel(steps, cal, ctx.additive_roofline);
  r.plan = MakePlan(steps, r.profile, r.verdict, r.model, cal, ctx, th);
  return r;
}

}  // namespace saturn
