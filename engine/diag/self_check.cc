// The report checks its own ceilings (docs/DIAGNOSTICS.md, "Self-check"): an achieved
// FLOP/s or bytes/s above a calibrated ceiling (whole window over step time, or any op class
// over its own timed time) proves that ceiling too low. The check says so in plain words,
// marks the calibration suspect and raises the ceiling the verdict is judged with to the
// observed maximum. A model whose weights and KV fit in the last-level cache is explained:
// its bytes come from cache, faster than the DRAM bandwidth calibrated. Pure.
#include <algorithm>

#include "absl/strings/str_format.h"
#include "engine/diag/analyzer.h"

namespace saturn {

CalibrationCheck CheckCalibration(const std::vector<StepRecord>& steps, const Profile& p,
                                  const Calibration& cal, const AnalyzerContext& ctx,
                                  const AnalyzerThresholds& th) {
  CalibrationCheck out;
  out.judged_flops_per_s = cal.gemm_flops_per_s;
  out.judged_bytes_per_s = cal.bandwidth_bytes_per_s;
  out.raw_mfu = p.mfu;
  out.raw_mbu = p.mbu;
  // The window's steps: its records and the per-second sums of older ones (ctx.earlier).
  const StepSums sums = SumWindow(steps, ctx, th);
  if (sums.steps == 0 || !(cal.gemm_flops_per_s > 0) || !(cal.bandwidth_bytes_per_s > 0))
    return out;

  // Candidates: the whole window over its step time, and each op class over its own time.
  struct Seen {
    std::string what;
    double flops_per_s, bytes_per_s;
  };
  std::vector<Seen> seen;
  const double wall = sums.wall_us;
  double flops = 0, bytes = 0;
  for (size_t c = 0; c < kNumOpClasses; ++c) {
    if (OnTheRoofline(c)) flops += sums.by_class[c].flops, bytes += sums.by_class[c].bytes;
  }
  if (wall > 0)
    seen.push_back({"the window's steps", flops / (wall * 1e-6), bytes / (wall * 1e-6)});
  for (const ClassProfile& c : p.classes) {
    // A class timed for under 1 ms in all is too short to judge a ceiling by.
    if (c.time_us < 1000 || !OnTheRoofline(static_cast<size_t>(c.op_class))) continue;
    seen.push_back(
        {absl::StrFormat("the %s class", OpClassName(c.op_class)), c.flops_per_s, c.bytes_per_s});
  }
  const double tol_f = 1 + std::max(th.ceiling_tolerance, cal.gemm_spread);
  const double tol_b = 1 + std::max(th.ceiling_tolerance, cal.bandwidth_spread);
  const double working_set = ctx.weight_bytes;  // read every step
  out.cache_resident = cal.cache_bytes > 0 && working_set > 0 && working_set <= cal.cache_bytes;
  const Seen* max_f = nullptr;
  const Seen* max_b = nullptr;
  for (const Seen& s : seen) {
    if (max_f == nullptr || s.flops_per_s > max_f->flops_per_s) max_f = &s;
    if (max_b == nullptr || s.bytes_per_s > max_b->bytes_per_s) max_b = &s;
  }
  out.observed_max_flops_per_s = max_f->flops_per_s;
  out.observed_max_bytes_per_s = max_b->bytes_per_s;
  if (max_f->flops_per_s > tol_f * cal.gemm_flops_per_s) {
    out.suspect = true;
    out.judged_flops_per_s = max_f->flops_per_s;
    out.notes.push_back(absl::StrFormat(
        "%s ran at %.1f GFLOP/s, %.2fx the calibrated GEMM peak of %.1f GFLOP/s: that peak is "
        "too low (calibration %s, likely measured while other work held the device); judged "
        "against the observed %.1f GFLOP/s instead",
        max_f->what, max_f->flops_per_s / 1e9, max_f->flops_per_s / cal.gemm_flops_per_s,
        cal.gemm_flops_per_s / 1e9, cal.source, max_f->flops_per_s / 1e9));
  }
  if (max_b->bytes_per_s > tol_b * cal.bandwidth_bytes_per_s) {
    out.suspect = true;
    out.judged_bytes_per_s = max_b->bytes_per_s;
    const std::string why =
        out.cache_resident ? absl::StrFormat(
                                 "the model's weights (%.1f MiB) fit in the %.0f MiB last-level "
                                 "cache, so its steps read from cache, not memory; the DRAM "
                                 "bandwidth is no roof for this model",
                                 working_set / (1 << 20), cal.cache_bytes / (1 << 20))
                           : absl::StrFormat(
                                 "that bandwidth is too low (calibration %s, likely measured while "
                                 "other work held the device)",
                                 cal.source);
    out.notes.push_back(absl::StrFormat(
        "%s moved %.1f GB/s, %.2fx the calibrated memory bandwidth of %.1f GB/s: %s; judged "
        "against the observed %.1f GB/s instead",
        max_b->what, max_b->bytes_per_s / 1e9, max_b->bytes_per_s / cal.bandwidth_bytes_per_s,
        cal.bandwidth_bytes_per_s / 1e9, why, max_b->bytes_per_s / 1e9));
  }
  // Above a ceiling by less than its noise: no proof that the calibration is wrong, but no
  // figure may read over 100 %, so the figures are judged against what was observed, and say so.
  auto within_noise = [&](const Seen& s, double rate, double ceiling, double tol, double* judged,
                          const char* what, const char* unit) {
    if (!(rate > ceiling) || rate > tol * ceiling) return;
    *judged = rate;
    out.notes.push_back(absl::StrFormat(
        "%s ran at %.1f %s, %.3fx the calibrated %s, inside the calibration's noise (+-%.0f%%): "
        "not suspect, but figures are judged against the observed %.1f %s",
        s.what, rate / 1e9, unit, rate / ceiling, what, 100 * (tol - 1), rate / 1e9, unit));
  };
  within_noise(*max_f, max_f->flops_per_s, cal.gemm_flops_per_s, tol_f, &out.judged_flops_per_s,
               "GEMM peak", "GFLOP/s");
  within_noise(*max_b, max_b->bytes_per_s, cal.bandwidth_bytes_per_s, tol_b,
               &out.judged_bytes_per_s, "memory bandwidth", "GB/s");
  if (!cal.stable) {
    out.notes.push_back(
        "calibration trials never agreed within their tolerance (a busy machine): ceilings "
        "are the best trial seen; run saturn-diag recalibrate when the machine is quieter");
  }
  return out;
}

}  // namespace saturn
