// DiagnosticsReport -> compact text for terminals (report_format.h). Example:
//
//   verdict   MEMORY_BOUND  intensity 0.5 FLOP/B under the ridge 2.1; MBU 71%, MFU 2.4% ...
//   busy      99%  (nvidia-smi style)   MFU 2.4%   MBU 71%   idle 1%  host 0%  launch 0%
//   rate      27.9 tok/s (prefill 0.0, decode 27.9)  28.1 steps/s  batch 1.0 seqs 1.0 tok
//   ...
//   plan  action                          tok/s before -> after   TPOT ms before -> after
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/diag/report_format.h"

namespace saturn {

std::string ReportToText(const DiagnosticsReport& r) {
  const Profile& p = r.profile;
  std::string out;
  absl::StrAppendFormat(&out, "%-9s %s\n", "verdict", r.verdict.summary);
  const CalibrationCheck& cc = r.verdict.calibration_check;
  if (cc.suspect) {
    absl::StrAppendFormat(&out,
                          "%-9s SUSPECT: a measured rate exceeds a ceiling (MFU %.0f%%, "
                          "MBU %.0f%% against the calibration; figures below use the observed "
                          "maxima)\n",
                          "calib", 100 * cc.raw_mfu, 100 * cc.raw_mbu);
  }
  for (const std::string& n : cc.notes) absl::StrAppendFormat(&out, "%-9s - %s\n", "", n);
  if (!r.verdict.window_note.empty()) {
    absl::StrAppendFormat(&out, "%-9s %s\n", "window", r.verdict.window_note);
  }
  if (!r.verdict.headroom.empty()) {
    absl::StrAppendFormat(&out, "%-9s steps at %.0f%% of peak FLOP/s, %.0f%% of bandwidth%s\n",
                          "headroom", 100 * r.verdict.step_mfu, 100 * r.verdict.step_mbu,
                          r.verdict.far_below_roofs ? " (far below both roofs)" : "");
    for (const Headroom& h : r.verdict.headroom) {
      absl::StrAppendFormat(&out,
                            "%-9s - %s: %.0f%% of the step at %.0f%% of its roof; at its roof the "
                            "step is %.0f%% shorter (%.2fx tokens/s)\n",
                            "", OpClassName(h.op_class), 100 * h.step_share,
                            100 * h.roofline_efficiency, 100 * h.step_saved_share, h.speedup);
    }
  }
  absl::StrAppendFormat(&out,
                        "%-9s %3.0f%% (nvidia-smi style)  MFU %.1f%%  MBU %.1f%%  idle %.0f%%  "
                        "host %.0f%%  launch %.0f%%\n",
                        "busy", 100 * p.busy_fraction, 100 * p.mfu, 100 * p.mbu, 100 * p.idle_share,
                        100 * p.host_share, 100 * p.launch_share);
  absl::StrAppendFormat(&out,
                        "%-9s %.1f tok/s (prefill %.1f, decode %.1f, output %.1f)  %.1f steps/s  "
                        "batch %.1f seqs %.1f tokens  step %.2f ms\n",
                        "rate", p.tokens_per_s, p.prefill_tokens_per_s, p.decode_tokens_per_s,
                        p.output_tokens_per_s, p.steps_per_s, p.mean_batch_seqs,
                        p.mean_batch_tokens, p.mean_step_ms);
  absl::StrAppendFormat(&out,
                        "%-9s intensity %.2f FLOP/B vs ridge %.2f  (peak %.1f GFLOP/s, %.1f GB/s, "
                        "dispatch %.2f us/op)\n",
                        "roofline", p.intensity, p.ridge, r.calibration.gemm_flops_per_s / 1e9,
                        r.calibration.bandwidth_bytes_per_s / 1e9, r.calibration.op_dispatch_us);
  absl::StrAppendFormat(&out,
                        "%-9s waiting %.1f (max %d)  running %.1f  KV %.0f%% (max %.0f%%)  "
                        "preempted %d  graphs %.0f%% hit, %.0f%% padding\n",
                        "serving", p.mean_queue_depth, p.max_queue_depth, p.mean_running,
                        100 * p.kv_usage, 100 * p.kv_usage_max, p.preemptions,
                        100 * p.graph_hit_rate, 100 * p.padding_waste);
  if (!p.classes.empty()) {
    absl::StrAppendFormat(&out, "%-9s %-12s %6s %8s %9s %7s %7s %7s\n", "classes", "class", "time%",
                          "FLOP/B", "ops/step", "MFU%", "MBU%", "roof%");
    for (const ClassProfile& c : p.classes) {
      absl::StrAppendFormat(&out, "%-9s %-12s %6.1f %8.2f %9d %7.1f %7.1f %7.0f\n", "",
                            OpClassName(c.op_class), 100 * c.time_share, c.intensity,
                            c.ops_per_step, 100 * c.mfu, 100 * c.mbu, 100 * c.roofline_efficiency);
    }
  }
  absl::StrAppendFormat(&out, "%-9s", "signals");
  for (const Signal& s : r.verdict.signals) {
    absl::StrAppendFormat(&out, " %s=%.3g%s%.3g", s.name, s.value, s.crossed ? "!" : "/",
                          s.threshold);
  }
  out += "\n";
  const bool sum = r.model.rates[static_cast<size_t>(OpClass::kGemm)].additive;
  absl::StrAppendFormat(&out,
                        "%-9s step = %.0f us + %.2f us/seq + ops x %.2f us + sum_c %s; fit error "
                        "%.1f%% over %d steps\n",
                        "model", r.model.host_us, r.model.host_us_per_seq, r.model.op_overhead_us,
                        sum ? "(B/BW_c + F/P_c)" : "max(B/BW_c, F/P_c)", 100 * r.model.fit_error,
                        r.model.fitted_steps);
  const Plan& pl = r.plan;
  absl::StrAppendFormat(&out,
                        "%-9s batch %.0f, context %.0f, KV holds %d seqs of %.0f tokens, "
                        "plateau %.1f tok/s reached (90%%) at batch %d\n",
                        "plan", pl.batch_now, pl.context, pl.kv_capacity_batch, pl.expected_seq_len,
                        pl.plateau_tokens_per_s, pl.plateau_batch);
  if (pl.measured_max_batch > 0 || pl.measured_max_prefill_rows > 0) {
    absl::StrAppendFormat(&out,
                          "%-9s measured step shapes: decode batch <= %.0f, prefill rows <= %.0f "
                          "(%s)\n",
                          "", pl.measured_max_batch, pl.measured_max_prefill_rows,
                          pl.used_probe ? "window + probe steps" : "window only");
  }
  if (pl.actions.empty()) {
    absl::StrAppendFormat(&out, "%-9s %s\n", "", pl.note);
  } else {
    absl::StrAppendFormat(&out, "  %-2s %-58s %21s %19s\n", "#", "action", "tok/s before->after",
                          "TPOT ms before->after");
    int i = 0;
    for (const Action& a : pl.actions) {
      absl::StrAppendFormat(&out, "  %-2d %-58s %9.1f -> %-9.1f %7.2f -> %-7.2f\n", ++i, a.what,
                            a.tokens_per_s_before, a.tokens_per_s_after, a.tpot_ms_before,
                            a.tpot_ms_after);
      absl::StrAppendFormat(&out, "       expected error +-%.0f%%%s\n", 100 * a.expected_error,
                            a.outside_measured ? " (beyond the measured step shapes)" : "");
      for (const FailureMode& f : a.tradeoffs) {
        absl::StrAppendFormat(&out, "       - %s: %s\n", f.name, f.detail);
      }
    }
  }
  if (r.tracked) {
    const TrackedOutcome& t = *r.tracked;
    absl::StrAppendFormat(&out,
                          "%-9s %s: predicted %.1f tok/s, measured %.1f (%+.1f%%) at batch %.1f; "
                          "TPOT %.2f vs %.2f ms (%+.1f%%); model at that batch %+.1f%%%s\n",
                          "applied", t.what, t.predicted_tokens_per_s, t.measured_tokens_per_s,
                          100 * t.tokens_per_s_error, t.measured_batch, t.predicted_tpot_ms,
                          t.measured_tpot_ms, 100 * t.tpot_error, 100 * t.model_error,
                          t.settled ? "" : " (not settled yet)");
  }
  return out;
}

}  // namespace saturn
