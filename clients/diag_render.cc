// Renderings of the Diagnostics report (see diag_render.h). The server info page is in
// diag_render_info.cc.
#include "clients/diag_render.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "google/protobuf/util/json_util.h"

namespace saturn::clients {
namespace {

double Pct(double share) { return 100 * share; }

void Tradeoffs(const v1::PlanAction& a, std::string* out) {
  for (const v1::Tradeoff& t : a.tradeoffs()) {
    absl::StrAppendFormat(out, "       - %s%s: %s\n", t.name(),
                          t.at() != 0 ? absl::StrFormat(" at %.4g", t.at()) : "", t.detail());
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

void Plan(const v1::DiagnosticsReport& r, std::string* out) {
  absl::StrAppendFormat(out, "%-10s KV holds %d seqs before preemption; plateau %.1f tok/s", "plan",
                        r.kv_capacity_batch(), r.plateau_tokens_per_s());
  if (r.plateau_batch() > 0) absl::StrAppendFormat(out, " (90%% at batch %d)", r.plateau_batch());
  if (!r.model_form().empty()) {
    absl::StrAppendFormat(out, "; step model %s, fit error %.1f%%", r.model_form(),
                          Pct(r.model_fit_error()));
  }
  out->append("\n");
  if (r.plan().empty()) {
    absl::StrAppendFormat(out, "%-10s no action: %s\n", "",
                          r.plan_note().empty() ? "(no reason given)" : r.plan_note());
    return;
  }
  absl::StrAppendFormat(out, "  %-2s %-56s %22s %20s %7s\n", "#", "action", "tok/s before -> after",
                        "TPOT ms before -> after", "batch");
  int i = 0;
  for (const v1::PlanAction& a : r.plan()) {
    absl::StrAppendFormat(out, "  %-2d %-56s %9.1f -> %-9.1f %8.2f -> %-8.2f %7.1f\n", ++i,
                          a.what(), a.tokens_per_s_before(), a.tokens_per_s_after(),
                          a.tpot_ms_before(), a.tpot_ms_after(), a.batch_after());
    if (a.expected_error() > 0) {
      absl::StrAppendFormat(out, "       expected error +-%.0f%%, prefill %.0f%% of step time%s\n",
                            100 * a.expected_error(), 100 * a.prefill_share(),
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

std::string ProtoJson(const google::protobuf::Message& m, bool pretty) {
  google::protobuf::util::JsonPrintOptions o;
  o.add_whitespace = pretty;
  o.always_print_primitive_fields = true;
  o.preserve_proto_field_names = true;
  std::string out;
  if (!google::protobuf::util::MessageToJsonString(m, &out, o).ok()) return "{}";
  return out;
}

std::string ActionLine(const v1::PlanAction& a) {
  return absl::StrFormat("%s: %.1f -> %.1f tok/s, TPOT %.2f -> %.2f ms", a.what(),
                         a.tokens_per_s_before(), a.tokens_per_s_after(), a.tpot_ms_before(),
                         a.tpot_ms_after());
}

std::string RenderReport(const v1::DiagnosticsReport& r) {
  const v1::Profile& p = r.profile();
  std::string out;
  absl::StrAppendFormat(&out, "%-10s %s  (steps are %s)\n", "verdict",
                        BottleneckName(r.bottleneck()), BottleneckName(r.step_bound()));
  if (!r.summary().empty()) absl::StrAppendFormat(&out, "%-10s %s\n", "", r.summary());
  absl::StrAppendFormat(&out, "%-10s %.2f s, %d steps (server clock %.0f .. %.0f us)\n", "window",
                        p.window_s(), p.steps(), r.window_begin_us(), r.window_end_us());
  if (!r.signals().empty()) {
    absl::StrAppendFormat(&out, "%-10s %-28s %10s %10s %8s\n", "signals", "name", "value",
                          "threshold", "crossed");
    for (const v1::Signal& s : r.signals()) {
      absl::StrAppendFormat(&out, "%-10s %-28s %10.3g %10.3g %8s\n", "", s.name(), s.value(),
                            s.threshold(), s.crossed() ? "YES" : "no");
      if (s.crossed() && !s.meaning().empty()) {
        absl::StrAppendFormat(&out, "%-10s   -> %s\n", "", s.meaning());
      }
    }
  }
  absl::StrAppendFormat(
      &out,
      "%-10s busy %.0f%% (nvidia-smi style)  MFU %.2f%%  MBU %.2f%%  idle %.0f%%  "
      "host %.0f%%  launch %.0f%%",
      "profile", Pct(p.busy_fraction()), Pct(p.mfu()), Pct(p.mbu()), Pct(p.idle_share()),
      Pct(p.host_share()), Pct(p.launch_share()));
  if (r.nvml_utilization() >= 0) absl::StrAppendFormat(&out, "  NVML %.0f%%", r.nvml_utilization());
  absl::StrAppendFormat(&out,
                        "\n%-10s %.1f tok/s (prefill %.1f, decode %.1f)  %.1f steps/s  batch %.2f "
                        "seqs, %.1f tokens  step %.2f ms (decode %.2f ms)\n",
                        "", p.tokens_per_s(), p.prefill_tokens_per_s(), p.decode_tokens_per_s(),
                        p.steps_per_s(), p.mean_batch_seqs(), p.mean_batch_tokens(),
                        p.mean_step_ms(), p.mean_decode_step_ms());
  absl::StrAppendFormat(&out, "%-10s intensity %.2f FLOP/B vs ridge %.2f; achieved %s, %s\n", "",
                        p.intensity(), p.ridge(), FormatSi(p.flops_per_s(), "FLOP/s"),
                        FormatSi(p.bytes_per_s(), "B/s"));
  absl::StrAppendFormat(&out,
                        "%-10s waiting %.1f  running %.1f  context %.0f  KV %.0f%% (max %.0f%%)  "
                        "preemptions %d  graphs %.0f%% hit, %.0f%% padding\n",
                        "", p.mean_queue_depth(), p.mean_running(), p.mean_context(),
                        Pct(p.kv_usage()), Pct(p.kv_usage_max()), p.preemptions(),
                        Pct(p.graph_hit_rate()), Pct(p.padding_waste()));
  Classes(r, &out);
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
  absl::StrAppendFormat(&out, "%-10s %-22s %12s %12s %9s\n", "", "", "predicted", "measured",
                        "error");
  absl::StrAppendFormat(&out, "%-10s %-22s %12.1f %12.1f %8.1f%%\n", "", "tokens/s",
                        t.predicted_tokens_per_s(), t.measured_tokens_per_s(),
                        Pct(t.tokens_per_s_error()));
  absl::StrAppendFormat(&out, "%-10s %-22s %12.2f %12.2f %8.1f%%\n", "", "TPOT (ms)",
                        t.predicted_tpot_ms(), t.measured_tpot_ms(), Pct(t.tpot_error()));
  absl::StrAppendFormat(&out, "%-10s %-22s %12.1f %12.1f %8.1f%%\n", "",
                        absl::StrFormat("model at batch %.1f", t.measured_batch()),
                        t.model_tokens_per_s_at_measured_batch(), t.measured_tokens_per_s(),
                        Pct(t.model_error()));
  return out;
}

std::vector<std::string> ShortDiagnosis(const v1::DiagnosticsReport& r) {
  const v1::Profile& p = r.profile();
  std::vector<std::string> lines;
  lines.push_back(absl::StrFormat(
      "%s (steps %s) over %d steps in %.2f s; busy %.2f, MFU %.2f, MBU %.2f, batch %.2f",
      BottleneckName(r.bottleneck()), BottleneckName(r.step_bound()), p.steps(), p.window_s(),
      p.busy_fraction(), p.mfu(), p.mbu(), p.mean_batch_seqs()));
  std::vector<std::string> crossed;
  for (const v1::Signal& s : r.signals()) {
    if (s.crossed()) {
      crossed.push_back(
          absl::StrFormat("%s %.2f (threshold %.2f)", s.name(), s.value(), s.threshold()));
    }
  }
  lines.push_back(
      absl::StrCat("signals: ", crossed.empty() ? "none crossed" : absl::StrJoin(crossed, "; ")));
  if (r.plan().empty()) {
    // The note is free text; its numbers are not JSON figures, so a note with digits is
    // left to the JSON file.
    const bool digits = r.plan_note().find_first_of("0123456789") != std::string::npos;
    lines.push_back(absl::StrCat("plan: no action", r.plan_note().empty() ? ""
                                                    : digits              ? " (why: see the JSON)"
                                                             : absl::StrCat(": ", r.plan_note())));
  } else {
    const v1::PlanAction& a = r.plan(0);
    lines.push_back(absl::StrFormat("plan: %s: %.2f -> %.2f tok/s, TPOT %.2f -> %.2f ms%s",
                                    a.what(), a.tokens_per_s_before(), a.tokens_per_s_after(),
                                    a.tpot_ms_before(), a.tpot_ms_after(),
                                    r.plan_size() > 1 ? " (more in JSON)" : ""));
  }
  return lines;
}

}  // namespace saturn::clients
