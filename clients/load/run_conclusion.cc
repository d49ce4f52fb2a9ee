// The end of saturn-load's table in plain words (run_table.h PlainConclusion): the verdict on
// the most loaded phase, why, what to change and the predicted gain, from the server's own
// diagnosis of that phase's window and the sweep's measured figures. Formatting only.
#include <cmath>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "clients/load/diagnosis.h"
#include "clients/load/run_table.h"
#include "proto/render/report_text.h"

namespace saturn::clients {
namespace {

std::string Percent(double fraction) { return absl::StrFormat("%.0f %%", fraction * 100); }

// Sentence case for the server's summary line.
std::string Sentence(std::string s) {
  while (!s.empty() && (s.back() == '.' || s.back() == ' ')) s.pop_back();
  if (!s.empty() && s[0] >= 'a' && s[0] <= 'z') s[0] = static_cast<char>(s[0] - 'a' + 'A');
  return s + ".";
}

}  // namespace

std::string PlainConclusion(const SessionResult& res) {
  const PhaseReport* last = nullptr;
  for (const PhaseReport& p : res.phases) {
    if (!p.diagnoses.empty()) last = &p;
  }
  std::string out = "\n== in plain words ==\n";
  if (last == nullptr && !res.diagnosis_skipped.empty()) {
    absl::StrAppend(&out, "No phase has a server diagnosis, so there is no verdict.\n");
    return out;
  }
  if (last == nullptr) {
    absl::StrAppend(&out, "No phase has a server diagnosis",
                    res.phases.empty() || res.phases.back().diagnosis_note.empty()
                        ? ""
                        : absl::StrCat(" (", res.phases.back().diagnosis_note, ")"),
                    ", so there is no verdict.\n");
    return out;
  }
  absl::StatusOr<v1::DiagnosticsReport> r = ParseDiagnosis(last->diagnoses[0]);
  if (!r.ok()) {
    absl::StrAppend(&out, "The diagnosis of ", last->label,
                    " could not be read: ", r.status().message(), "\n");
    return out;
  }
  const v1::Profile& prof = r->profile();
  absl::StrAppend(
      &out, "Verdict: at ", last->label, " the server was ", BottleneckName(r->bottleneck()),
      " (its steps ", BottleneckName(r->step_bound()), "): busy ", Percent(prof.busy_fraction()),
      ", MFU ", Percent(prof.mfu()), ", MBU ", Percent(prof.mbu()),
      absl::StrFormat(", %.1f sequences per step on average.\n", prof.mean_batch_seqs()));
  absl::StrAppend(&out, "Why: ", Sentence(r->summary()));
  const PhaseReport& first = res.phases.front();
  if (&first != last && first.metrics.output_token_throughput > 0) {
    const RunMetrics& a = first.metrics;
    const RunMetrics& b = last->metrics;
    absl::StrAppend(
        &out, absl::StrFormat(" Measured: output %.1f tok/s at %s, %.1f at %s (x%.2f), TPOT "
                              "p50 %.1f -> %.1f ms.",
                              a.output_token_throughput, first.label, b.output_token_throughput,
                              last->label, b.output_token_throughput / a.output_token_throughput,
                              a.tpot_ms.p50, b.tpot_ms.p50));
  }
  absl::StrAppend(&out, "\n");
  if (r->plan().empty()) {
    absl::StrAppend(&out, "What to change: nothing the diagnosis can predict a gain for",
                    r->plan_note().empty() ? "" : absl::StrCat(" (", r->plan_note(), ")"), ".\n");
  } else {
    const v1::PlanAction& a = r->plan(0);
    absl::StrAppend(&out, "What to change: ", a.what(), ".\n");
    const double before = a.tokens_per_s_before(), after = a.tokens_per_s_after();
    std::string gain = before > 0 ? absl::StrFormat(" (%+.0f %%)", (after / before - 1) * 100) : "";
    if (!a.untrusted().empty()) {
      absl::StrAppend(&out, "Predicted gain: none trusted (", a.untrusted(),
                      "). To settle it: ", a.settle_by(), ".\n");
    } else {
      absl::StrAppend(&out, absl::StrFormat("Predicted gain: %.1f -> %.1f tok/s%s, at a TPOT of "
                                            "%.1f -> %.1f ms (the server's step-time model, fit "
                                            "error %.1f %%).\n",
                                            before, after, gain, a.tpot_ms_before(),
                                            a.tpot_ms_after(), r->model_fit_error() * 100));
    }
  }
  const StabilityCheck& st = last->metrics.stability;
  if (!st.stable) {
    absl::StrAppend(&out, "Caveat: the load in ", last->label, " was not steady (",
                    st.note.empty() ? "its windows differ by more than 10 %" : st.note,
                    "); measure longer (--min_measure_s, --num_requests) before acting on it.\n");
  }
  return out;
}

}  // namespace saturn::clients
