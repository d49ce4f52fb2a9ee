// The text rendering of the Diagnostics report (see report_text.h). Example (abridged):
//
//   verdict    MEMORY_BOUND  (steps are MEMORY_BOUND)
//              MEMORY_BOUND: intensity 0.9 FLOP/B under the ridge 5.0; ...
//   window     10.00 s, 120 steps (server clock 1000000 .. 11000000 us)
//   signals    name                              value  threshold  crossed
//   profile    busy 97% (nvidia-smi style)  MFU 1.25%  MBU 71.00%  idle 0%  host 0%  launch 0%
//   classes    class         time%   FLOP/B ops/step       FLOP/s      bytes/s   MFU%   MBU%  roof%
//   model      step = 40 us + 1.50 us/seq + ops x 0.20 us + sum_c (B/BW_c + F/P_c); ...
//   plan       KV holds 64 seqs before preemption; plateau 310.0 tok/s (90% at batch 40)
//     #  action                          tok/s before -> after TPOT ms before -> after   batch
#include "proto/render/report_text.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace saturn {
namespace {

double Pct(double share) { return 100 * share; }

// Verdict, the calibration check, the window and where the steps lose time to their roofs.
void Verdict(const v1::DiagnosticsReport& r, std::string* out) {
  const v1::Profile& p = r.profile();
  absl::StrAppendFormat(out, "%-10s %s  (steps are %s)\n", "verdict",
                        BottleneckName(r.bottleneck()), BottleneckName(r.step_bound()));
  if (!r.summary().empty()) absl::StrAppendFormat(out, "%-10s %s\n", "", r.summary());
  if (r.calibration().suspect()) {
    absl::StrAppendFormat(out,
                          "%-10s SUSPECT: a measured rate exceeds a ceiling (MFU %.0f%%, MBU "
                          "%.0f%% against the calibration; figures below use the observed "
                          "maxima)\n",
                          "calib", Pct(r.raw_mfu()), Pct(r.raw_mbu()));
  }
  for (const std::string& n : r.calibration_notes()) {
    absl::StrAppendFormat(out, "%-10s - %s\n", r.calibration().suspect() ? "" : "calib", n);
  }
  absl::StrAppendFormat(out, "%-10s %.2f s, %d steps (server clock %.0f .. %.0f us)\n", "window",
                        p.window_s(), p.steps(), r.window_begin_us(), r.window_end_us());
  if (!r.window_note().empty()) absl::StrAppendFormat(out, "%-10s %s\n", "", r.window_note());
  if (const v1::TensorParallelProfile& t = r.tensor_parallel(); t.ranks() > 1) {
    absl::StrAppendFormat(out,
                          "%-10s %d ranks over %s: collectives %.0f%% of the step (%.0f a step, "
                          "%.0f us each at %.0f KB; %.1fx the roofline floor)\n",
                          "tp", t.ranks(), t.transport(), Pct(t.comm_share()),
                          t.collectives_per_step(), t.mean_collective_us(),
                          t.mean_collective_bytes() / 1024, t.comm_vs_roofline_floor());
    if (t.steps() > 0) {
      absl::StrAppendFormat(
          out,
          "%-10s wait %.0f%%, transfer %.0f%%; load balance %.2f, slowest rank "
          "%d (%.2fx the fastest's compute) over %d steps%s\n",
          "", Pct(t.wait_share()), Pct(t.transfer_share()), t.load_balance(), t.slowest_rank(),
          t.slowest_over_fastest(), static_cast<int>(t.steps()),
          t.single_host() ? "; one host: the ranks share its memory bandwidth" : "");
    }
    if (t.calibrated_us() > 0) {
      absl::StrAppendFormat(out,
                            "%-10s an all-reduce's transfer %.1f us, %.2fx the %.1f us the link "
                            "was calibrated at for this message\n",
                            "", t.transfer_us(), t.transfer_vs_calibrated(), t.calibrated_us());
    }
  }
  if (!r.headroom().empty()) {
    absl::StrAppendFormat(out, "%-10s steps at %.0f%% of peak FLOP/s, %.0f%% of bandwidth%s\n",
                          "headroom", Pct(r.step_mfu()), Pct(r.step_mbu()),
                          r.far_below_roofs() ? " (far below both roofs)" : "");
    for (const v1::Headroom& h : r.headroom()) {
      absl::StrAppendFormat(out,
                            "%-10s - %s: %.0f%% of the step at %.0f%% of its roof; at its roof "
                            "the step is %.0f%% shorter (%.2fx tokens/s)\n",
                            "", h.op_class(), Pct(h.step_share()), Pct(h.roofline_efficiency()),
                            Pct(h.step_saved_share()), h.speedup());
    }
  }
}

void Signals(const v1::DiagnosticsReport& r, std::string* out) {
  if (r.signals().empty()) return;
  absl::StrAppendFormat(out, "%-10s %-28s %10s %10s %8s\n", "signals", "name", "value", "threshold",
                        "crossed");
  for (const v1::Signal& s : r.signals()) {
    absl::StrAppendFormat(out, "%-10s %-28s %10.3g %10.3g %8s\n", "", s.name(), s.value(),
                          s.threshold(), s.crossed() ? "YES" : "no");
    if (s.crossed() && !s.meaning().empty()) {
      absl::StrAppendFormat(out, "%-10s   -> %s\n", "", s.meaning());
    }
  }
}

void Profile(const v1::DiagnosticsReport& r, std::string* out) {
  const v1::Profile& p = r.profile();
  const v1::Calibration& c = r.calibration();
  absl::StrAppendFormat(
      out,
      "%-10s busy %.0f%% (nvidia-smi style)  MFU %.2f%%  MBU %.2f%%  idle %.0f%%  "
      "host %.0f%%  launch %.0f%%",
      "profile", Pct(p.busy_fraction()), Pct(p.mfu()), Pct(p.mbu()), Pct(p.idle_share()),
      Pct(p.host_share()), Pct(p.launch_share()));
  if (r.nvml_utilization() >= 0) absl::StrAppendFormat(out, "  NVML %.0f%%", r.nvml_utilization());
  absl::StrAppendFormat(out,
                        "\n%-10s %.1f tok/s (prefill %.1f, decode %.1f, output %.1f)  %.1f "
                        "steps/s  batch %.2f seqs, %.1f tokens  step %.2f ms (decode %.2f ms)\n",
                        "", p.tokens_per_s(), p.prefill_tokens_per_s(), p.decode_tokens_per_s(),
                        p.output_tokens_per_s(), p.steps_per_s(), p.mean_batch_seqs(),
                        p.mean_batch_tokens(), p.mean_step_ms(), p.mean_decode_step_ms());
  absl::StrAppendFormat(out,
                        "%-10s intensity %.2f FLOP/B vs ridge %.2f; achieved %s, %s; peak %s, "
                        "%s, dispatch %.2f us/op%s\n",
                        "", p.intensity(), p.ridge(), FormatSi(p.flops_per_s(), "FLOP/s"),
                        FormatSi(p.bytes_per_s(), "B/s"), FormatSi(c.gemm_flops_per_s(), "FLOP/s"),
                        FormatSi(c.bandwidth_bytes_per_s(), "B/s"), c.op_dispatch_us(),
                        c.graph_launch_us() > 0
                            ? absl::StrFormat(", %.2f us/graph launch", c.graph_launch_us())
                            : std::string());
  absl::StrAppendFormat(out,
                        "%-10s waiting %.1f (max %d)  running %.1f  context %.0f  KV %.0f%% (max "
                        "%.0f%%)  preemptions %d  graphs %.0f%% hit, %.0f%% padding\n",
                        "", p.mean_queue_depth(), p.max_queue_depth(), p.mean_running(),
                        p.mean_context(), Pct(p.kv_usage()), Pct(p.kv_usage_max()), p.preemptions(),
                        Pct(p.graph_hit_rate()), Pct(p.padding_waste()));
  if (p.prefix_hit_rate() > 0 || p.prefix_missed_rate() > 0) {
    absl::StrAppendFormat(
        out, "%-10s prefix cache: %s; %.0f%% of step time in steps carrying prefill\n", "",
        p.prefix_missed_rate() > 0
            ? absl::StrFormat("OFF, %.0f%% of admitted tokens were cached and recomputed "
                              "(%.1f tok/s)",
                              Pct(p.prefix_missed_rate()), p.prefix_missed_tokens_per_s())
            : absl::StrFormat("%.0f%% hit, %.1f tok/s not computed", Pct(p.prefix_hit_rate()),
                              p.prefix_saved_tokens_per_s()),
        Pct(p.prefill_step_share()));
  }
  if (p.spec_proposal_rate() > 0) {
    absl::StrAppendFormat(
        out,
        "%-10s speculation: %s; %.0f%% of decodes proposed %.1f tokens, %.0f%% kept (%.2f per "
        "proposal)%s\n",
        "", p.speculating() ? "on" : "OFF, scored on proposals not used",
        Pct(p.spec_proposal_rate()), p.spec_mean_drafted(), Pct(p.spec_acceptance_rate()),
        p.spec_mean_accepted(),
        p.speculating() ? absl::StrFormat(", %.1f kept tok/s", p.spec_accepted_tokens_per_s())
                        : std::string());
  }
}

void Classes(const v1::DiagnosticsReport& r, std::string* out) {
  if (r.classes().empty()) return;
  absl::StrAppendFormat(out, "%-10s %-12s %6s %8s %8s %12s %12s %6s %6s %6s\n", "classes", "class",
                        "time%", "FLOP/B", "ops/step", "FLOP/s", "bytes/s", "MFU%", "MBU%",
                        "roof%");
  for (const v1::OpClassProfile& c : r.classes()) {
    absl::StrAppendFormat(out, "%-10s %-12s %6.1f %8.2f %8d %12s %12s %6.1f %6.1f %6.0f\n", "",
                          c.op_class(), Pct(c.time_share()), c.intensity(), c.ops_per_step(),
                          FormatSi(c.flops_per_s(), ""), FormatSi(c.bytes_per_s(), ""),
                          Pct(c.mfu()), Pct(c.mbu()), Pct(c.roofline_efficiency()));
  }
}

// The step-time model's terms (docs/DIAGNOSTICS.md), when the report carries one.
void Model(const v1::DiagnosticsReport& r, std::string* out) {
  if (!r.has_model()) return;
  const v1::StepModel& m = r.model();
  absl::StrAppendFormat(out,
                        "%-10s step = %.0f us + %.2f us/seq + ops x %.2f us + sum_c %s; fit error "
                        "%.1f%% over %d steps\n",
                        "model", m.host_us(), m.host_us_per_seq(), m.op_overhead_us(),
                        r.model_form() == "sum" ? "(B/BW_c + F/P_c)" : "max(B/BW_c, F/P_c)",
                        Pct(m.fit_error()), m.fitted_steps());
}

void Tradeoffs(const v1::PlanAction& a, std::string* out) {
  for (const v1::Tradeoff& t : a.tradeoffs()) {
    absl::StrAppendFormat(out, "       - %s%s: %s\n", t.name(),
                          t.at() != 0 ? absl::StrFormat(" at %.4g", t.at()) : "", t.detail());
  }
}

void Plan(const v1::DiagnosticsReport& r, std::string* out) {
  absl::StrAppendFormat(out, "%-10s KV holds %d seqs before preemption; plateau %.1f tok/s", "plan",
                        r.kv_capacity_batch(), r.plateau_tokens_per_s());
  if (r.plateau_batch() > 0) absl::StrAppendFormat(out, " (90%% at batch %d)", r.plateau_batch());
  if (!r.model_form().empty()) {
    absl::StrAppendFormat(out, "; step model %s, fit error %.1f%%", r.model_form(),
                          Pct(r.model_fit_error()));
  }
  out->append("\n");
  if (r.plan_batch_now() > 0 || r.plan_context() > 0 || r.plan_expected_seq_len() > 0) {
    absl::StrAppendFormat(out, "%-10s now batch %.0f, context %.0f; sequences of %.0f tokens\n", "",
                          r.plan_batch_now(), r.plan_context(), r.plan_expected_seq_len());
  }
  if (r.measured_max_batch() > 0 || r.measured_max_prefill_rows() > 0) {
    absl::StrAppendFormat(out,
                          "%-10s measured step shapes: decode batch <= %.0f, prefill rows <= %.0f "
                          "(%s)\n",
                          "", r.measured_max_batch(), r.measured_max_prefill_rows(),
                          r.used_probe() ? "window + probe steps" : "window only");
  }
  if (r.step_drift() > 0) {
    absl::StrAppendFormat(
        out,
        "%-10s decode steps of the same rows moved %.0f%% from the window's first "
        "half to its second: that joins each expected error\n",
        "", Pct(r.step_drift()));
  }
  if (r.sampling_gap_us_per_row() > 0) {
    absl::StrAppendFormat(out,
                          "%-10s probed decode steps + %.0f us a row: the requests' sampling, "
                          "which the probe's greedy steps do not do\n",
                          "", r.sampling_gap_us_per_row());
  }
  if (r.plan().empty()) {
    absl::StrAppendFormat(out, "%-10s no action: %s\n", "",
                          r.plan_note().empty() ? "(no reason given)" : r.plan_note());
    return;
  }
  absl::StrAppendFormat(out, "  %-2s %-56s %22s %20s %7s\n", "#", "action", "tok/s before -> after",
                        "TPOT ms before -> after", "batch");
  int i = 0;
  for (const v1::PlanAction& a : r.plan()) {
    if (!a.untrusted().empty()) {  // no number to act on: why, and what would settle it
      absl::StrAppendFormat(out, "  %-2d %-56s %9.1f -> %-9s %8.2f -> %-8s %7s\n", ++i, a.what(),
                            a.tokens_per_s_before(), "?", a.tpot_ms_before(), "?", "?");
      absl::StrAppendFormat(out, "       no trusted prediction: %s\n", a.untrusted());
      absl::StrAppendFormat(out, "       to settle it: %s\n", a.settle_by());
      Tradeoffs(a, out);
      continue;
    }
    absl::StrAppendFormat(out, "  %-2d %-56s %9.1f -> %-9.1f %8.2f -> %-8.2f %7.1f\n", ++i,
                          a.what(), a.tokens_per_s_before(), a.tokens_per_s_after(),
                          a.tpot_ms_before(), a.tpot_ms_after(), a.batch_after());
    if (a.expected_error() > 0) {
      absl::StrAppendFormat(out, "       expected error +-%.0f%%, prefill %.0f%% of step time%s\n",
                            Pct(a.expected_error()), Pct(a.prefill_share()),
                            a.outside_measured() ? ", outside the measured step shapes" : "");
    }
    Tradeoffs(a, out);
  }
}

}  // namespace

std::string BottleneckName(v1::Bottleneck b) {
  switch (b) {
    case v1::BOTTLENECK_UNDERLOADED:
      return "UNDERLOADED";
    case v1::BOTTLENECK_LAUNCH_BOUND:
      return "LAUNCH_BOUND";
    case v1::BOTTLENECK_MEMORY_BOUND:
      return "MEMORY_BOUND";
    case v1::BOTTLENECK_COMPUTE_BOUND:
      return "COMPUTE_BOUND";
    case v1::BOTTLENECK_HOST_BOUND:
      return "HOST_BOUND";
    case v1::BOTTLENECK_COMMUNICATION_BOUND:
      return "COMMUNICATION_BOUND";
    default:
      return "UNKNOWN (no steps)";
  }
}

std::string FormatSi(double value, const std::string& unit) {
  static const char* kPrefix[] = {"", "k", "M", "G", "T", "P"};
  const std::string sep = unit.empty() ? "" : " ";
  if (!std::isfinite(value)) return absl::StrCat("-", sep, unit);
  int e = 0;
  double v = value;
  while (std::abs(v) >= 1000 && e < 5) {
    v /= 1000;
    ++e;
  }
  const std::string num = std::abs(v) >= 100  ? absl::StrFormat("%.0f", v)
                          : std::abs(v) >= 10 ? absl::StrFormat("%.1f", v)
                                              : absl::StrFormat("%.2f", v);
  if (unit.empty()) return absl::StrCat(num, kPrefix[e]);
  return absl::StrCat(num, sep, kPrefix[e], unit);
}

std::string ActionLine(const v1::PlanAction& a) {
  if (!a.untrusted().empty()) {
    return absl::StrFormat("%s: %.1f tok/s now, no trusted prediction (%s; to settle it: %s)",
                           a.what(), a.tokens_per_s_before(), a.untrusted(), a.settle_by());
  }
  return absl::StrFormat("%s: %.1f -> %.1f tok/s, TPOT %.2f -> %.2f ms", a.what(),
                         a.tokens_per_s_before(), a.tokens_per_s_after(), a.tpot_ms_before(),
                         a.tpot_ms_after());
}

std::string RenderReport(const v1::DiagnosticsReport& r) {
  std::string out;
  Verdict(r, &out);
  Signals(r, &out);
  Profile(r, &out);
  Classes(r, &out);
  Model(r, &out);
  Plan(r, &out);
  if (r.has_tracked()) out += RenderTracked(r.tracked());
  return out;
}

std::string RenderTracked(const v1::TrackedOutcome& t) {
  std::string out;
  absl::StrAppendFormat(
      &out, "%-10s %s (%s)\n", "tracked", t.what(),
      t.settled() ? absl::StrFormat("settled, %d steady steps", t.steady_steps())
                  : absl::StrFormat("not settled yet: %d steady steps", t.steady_steps()));
  absl::StrAppendFormat(&out, "%-10s %-24s %12s %12s %9s\n", "",
                        absl::StrFormat("applied at %.0f us", t.applied_us()), "predicted",
                        "measured", "error");
  absl::StrAppendFormat(&out, "%-10s %-24s %12.1f %12.1f %8.1f%%\n", "", "tokens/s",
                        t.predicted_tokens_per_s(), t.measured_tokens_per_s(),
                        Pct(t.tokens_per_s_error()));
  absl::StrAppendFormat(&out, "%-10s %-24s %12.2f %12.2f %8.1f%%\n", "", "TPOT (ms)",
                        t.predicted_tpot_ms(), t.measured_tpot_ms(), Pct(t.tpot_error()));
  absl::StrAppendFormat(&out, "%-10s %-24s %12.1f %12.1f %8.1f%%\n", "",
                        absl::StrFormat("model at batch %.1f", t.measured_batch()),
                        t.model_tokens_per_s_at_measured_batch(), t.measured_tokens_per_s(),
                        Pct(t.model_error()));
  if (t.step_time_drift() > 0) {
    absl::StrAppendFormat(
        &out,
        "%-10s steps ran %.0f%% %s than the plan's step curve says for their batch (%d steps: "
        "other load on the machine, or serving costs the probes did not see); with the "
        "prediction rescaled by that, tokens/s error %.1f%%\n",
        "", 100 * std::abs(t.step_time_drift() - 1), t.step_time_drift() >= 1 ? "slower" : "faster",
        t.drift_steps(), Pct(t.drift_corrected_error()));
  }
  return out;
}

}  // namespace saturn
