// Analyze(): profile -> self-check of the ceilings -> verdict -> step model -> plan
// (analyzer.h).
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
  const CalibrationCheck check = CheckCalibration(steps, r.profile, cal, ctx, th);
  // Judge with ceilings the window has not disproved: a ceiling known to be low is raised
  // to the observed maximum (the report keeps the calibrated figures and says why); one
  // exceeded by less than its noise too, so that no figure reads over 100 %.
  Calibration judged = cal;
  if (check.judged_flops_per_s != cal.gemm_flops_per_s ||
      check.judged_bytes_per_s != cal.bandwidth_bytes_per_s) {
    judged.gemm_flops_per_s = check.judged_flops_per_s;
    judged.bandwidth_bytes_per_s = check.judged_bytes_per_s;
    r.profile = ComputeProfile(steps, window_begin_us, window_end_us, judged, ctx, th);
  }
  r.verdict = Classify(steps, r.profile, judged, ctx, th);
  r.verdict.calibration_check = check;
  r.model = FitStepModel(steps, judged, ctx.additive_roofline);
  r.plan = MakePlan(steps, r.profile, r.verdict, r.model, ctx, th);
  return r;
}

}  // namespace saturn
