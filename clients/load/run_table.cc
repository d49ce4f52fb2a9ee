// The end-of-run table, the CUDA-graphs comparison rows and the progress display (see
// run_table.h). The JSON and CSV writers are in run_files.cc.
#include "clients/load/run_table.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "clients/load/diagnosis.h"
#include "proto/render/report_text.h"

namespace saturn::clients {
namespace {

std::string F(double x) { return absl::StrFormat("%.2f", x); }

// The server's diagnosis of the phase's window, three lines per server (diagnosis.h
// ShortDiagnosis).
void Diagnosis(const SessionResult& res, const PhaseReport& p, std::string* out) {
  if (!res.diagnosis_skipped.empty()) return;  // said once, above the phases
  if (p.diagnoses.empty()) {
    absl::StrAppend(out, "  diagnosis    not available: ", p.diagnosis_note, "\n");
    return;
  }
  for (const std::string& d : p.diagnoses) {
    absl::StatusOr<v1::DiagnosticsReport> r = ParseDiagnosis(d);
    if (!r.ok()) {
      absl::StrAppend(out, "  diagnosis    unreadable: ", r.status().message(), "\n");
      continue;
    }
    const char* head = "  diagnosis    ";
    for (const std::string& line : ShortDiagnosis(*r)) {
      absl::StrAppend(out, head, line, "\n");
      head = "               ";
    }
  }
}

// --follow_plan: under a follow-up phase, the prediction against what it measured; under the
// phase before it, why its plan was not followed.
void FollowLine(const PhaseReport& p, std::string* out) {
  if (!p.follow_note.empty()) absl::StrAppend(out, "  plan         ", p.follow_note, "\n");
  if (!p.followed.has_value()) return;
  const FollowedPlan& f = *p.followed;
  const char* unit = f.metric == "decoding_step_tokens_per_s" ? "tok/s of steps with decodes"
                                                              : "tok/s of decode steps";
  const bool client = f.kind == "raise_client_concurrency";
  absl::StrAppend(out, "  plan         followed the previous phase's top action (",
                  client ? "more clients" : "", client && !f.change.empty() ? " and " : "",
                  f.change.empty() ? "" : "options sent", "): ");
  if (!f.untrusted.empty()) {  // the plan stated no number: the measurement is the answer
    absl::StrAppend(out, "no trusted prediction (", f.untrusted, ")");
    if (f.measured > 0) {
      absl::StrAppend(out, "; the server measured ", F(f.measured), " ", unit, " over the phase (",
                      F(f.delivered), " output tok/s with idle time)");
    }
    if (!f.note.empty()) absl::StrAppend(out, "; ", f.note);
    absl::StrAppend(out, "\n");
    return;
  }
  absl::StrAppend(out, "predicted ", F(f.predicted), " ", unit);
  if (f.measured > 0) {
    absl::StrAppend(out, ", the server measured ", F(f.measured),
                    absl::StrFormat(" over the phase (%+.1f%%, expected within %.0f%%; %s output "
                                    "tok/s with idle time)",
                                    100 * f.error, 100 * f.expected_error, F(f.delivered)));
  }
  if (!f.note.empty()) absl::StrAppend(out, "; ", f.note);
  absl::StrAppend(out, "\n");
}

// One line per phase of a graphs comparison: verdict and top action.
std::string DiagnosisLine(const PhaseReport& p) {
  if (p.diagnoses.empty()) return absl::StrCat("not available: ", p.diagnosis_note);
  absl::StatusOr<v1::DiagnosticsReport> r = ParseDiagnosis(p.diagnoses[0]);
  if (!r.ok()) return "unreadable";
  return absl::StrCat(BottleneckName(r->bottleneck()), "; ",
                      r->plan().empty() ? "no plan action" : r->plan(0).what());
}

void Block(const SessionResult& res, const PhaseReport& p, std::string* out) {
  const RunMetrics& m = p.metrics;
  absl::StrAppend(out, "\n== ", p.label, " (",
                  p.open_loop ? "open loop, Poisson arrivals" : "closed loop", ") ==\n");
  if (res.config.openai() || res.config.compare_api()) {
    // The target itself is in the header (its port would be a figure the JSON holds as text).
    absl::StrAppend(out, "  api          ", p.api,
                    p.api == "openai" ? " (POST /v1/completions, streamed)" : " (Generate)", "\n");
  }
  absl::StrAppendFormat(out,
                        "  requests     sent %d  completed %d  errors %d  measured %d  "
                        "warm-up excluded %d\n",
                        m.sent, m.completed, m.errors, m.measured, m.warmup_excluded);
  if (!m.errors_by_code.empty()) {
    std::vector<std::string> parts;
    for (const auto& [code, n] : m.errors_by_code) parts.push_back(absl::StrCat(code, " ", n));
    absl::StrAppend(out, "  errors by    ", absl::StrJoin(parts, ", "), "\n");
  }
  if (!p.outcome.measure_note.empty()) {
    absl::StrAppend(out, "  extended     ", p.outcome.measure_note, "\n");
  }
  if (!p.outcome.stop_reason.empty()) {
    absl::StrAppend(out, "  stopped      ", p.outcome.stop_reason, "\n");
  }
  const StabilityCheck& st = m.stability;
  std::vector<std::string> thirds;
  for (double x : st.window_output_throughput) thirds.push_back(F(x));
  absl::StrAppend(out, "  window       ", F(m.window_s), " s measured of ", F(m.run_duration_s),
                  " s run; steady: ",
                  thirds.empty()
                      ? absl::StrCat("not judged (", st.note, ")")
                      : absl::StrCat(st.stable ? "yes" : "no", " (out tok/s per third of the ",
                                     F(st.span_end_s - st.span_start_s),
                                     " s under load: ", absl::StrJoin(thirds, ", "), ")"),
                  "\n");
  absl::StrAppend(out, "  throughput   ", F(m.request_throughput), " req/s   ",
                  F(m.output_token_throughput), " output tok/s   ", F(m.input_token_throughput),
                  " input tok/s\n");
  std::string slo;
  if (res.config.slo_ttft_ms > 0)
    absl::StrAppend(&slo, " TTFT <= ", F(res.config.slo_ttft_ms), " ms");
  if (res.config.slo_tpot_ms > 0)
    absl::StrAppend(&slo, " TPOT <= ", F(res.config.slo_tpot_ms), " ms");
  absl::StrAppend(out, "  goodput      ", F(m.goodput), " req/s (", m.good_requests, " good, ",
                  F(m.good_fraction * 100), " % of measured; SLO:", slo.empty() ? " none" : slo,
                  ")\n");
  absl::StrAppendFormat(out, "  %-16s %10s %10s %10s %10s %8s\n", "latency (ms)", "mean", "p50",
                        "p90", "p99", "n");
  auto row = [out](const char* name, const Summary& s) {
    absl::StrAppendFormat(out, "  %-16s %10s %10s %10s %10s %8d\n", name, F(s.mean), F(s.p50),
                          F(s.p90), F(s.p99), s.count);
  };
  row("TTFT", m.ttft_ms);
  row("TPOT", m.tpot_ms);
  row("ITL", m.itl_ms);
  row("E2E", m.e2e_ms);
  row("queue (server)", m.queue_ms);
  Diagnosis(res, p, out);
  FollowLine(p, out);
}

void Sweep(const SessionResult& res, std::string* out) {
  absl::StrAppend(out, "\n== summary ==\n");
  absl::StrAppendFormat(out, "  %-18s %8s %10s %8s %9s %9s %9s %9s %9s %9s %6s\n", "phase", "req/s",
                        "out tok/s", "goodput", "TTFT p50", "TTFT p99", "TPOT p50", "TPOT p99",
                        "E2E p50", "E2E p99", "errors");
  for (const PhaseReport& p : res.phases) {
    const RunMetrics& m = p.metrics;
    absl::StrAppendFormat(out, "  %-18s %8s %10s %8s %9s %9s %9s %9s %9s %9s %6d\n", p.label,
                          F(m.request_throughput), F(m.output_token_throughput), F(m.goodput),
                          F(m.ttft_ms.p50), F(m.ttft_ms.p99), F(m.tpot_ms.p50), F(m.tpot_ms.p99),
                          F(m.e2e_ms.p50), F(m.e2e_ms.p99), m.errors);
  }
}

void CompareApi(const SessionResult& res, std::string* out) {
  for (size_t i = 0; i + 1 < res.phases.size(); i += 2) {
    const PhaseReport& grpc = res.phases[i];
    const PhaseReport& http = res.phases[i + 1];
    if (!IsApiPair(grpc, http)) continue;
    absl::StrAppend(out, "\n== API: ", grpc.label, " vs ", http.label, " ==\n");
    absl::StrAppendFormat(out, "  %-28s %12s %12s %10s\n", "", "gRPC", "HTTP", "HTTP/gRPC");
    for (const CompareRow& r : CompareRows(grpc, http)) {
      absl::StrAppendFormat(out, "  %-28s %12s %12s %9sx\n", r.name, F(r.off), F(r.on), F(r.ratio));
    }
    const ApiRatios q = ApiCompareRatios(grpc, http);
    absl::StrAppend(out, "  HTTP/gRPC    TPOT p50 ", F(q.tpot_p50), "x, output tok/s ",
                    F(q.output_throughput), "x\n");
  }
}

void Compare(const SessionResult& res, std::string* out) {
  if (res.config.compare_api()) {
    CompareApi(res, out);
    return;
  }
  for (size_t i = 0; i + 1 < res.phases.size(); i += 2) {
    const PhaseReport& off = res.phases[i];
    const PhaseReport& on = res.phases[i + 1];
    if (off.cuda_graphs != 0 || on.cuda_graphs != 1) continue;
    absl::StrAppend(out, "\n== CUDA graphs: ", off.label, " vs ", on.label, " ==\n");
    absl::StrAppendFormat(out, "  %-28s %12s %12s %10s\n", "", "graphs off", "graphs on", "on/off");
    for (const CompareRow& r : CompareRows(off, on)) {
      absl::StrAppendFormat(out, "  %-28s %12s %12s %9sx\n", r.name, F(r.off), F(r.on), F(r.ratio));
    }
    absl::StrAppend(out, "  diagnosis, graphs off        ", DiagnosisLine(off), "\n");
    absl::StrAppend(out, "  diagnosis, graphs on         ", DiagnosisLine(on), "\n");
  }
}

}  // namespace

std::vector<CompareRow> CompareRows(const PhaseReport& off, const PhaseReport& on) {
  std::vector<CompareRow> rows;
  auto add = [&rows](const std::string& name, double a, double b) {
    rows.push_back({name, a, b, a != 0 ? b / a : 0});
  };
  const RunMetrics& a = off.metrics;
  const RunMetrics& b = on.metrics;
  add("request throughput (req/s)", a.request_throughput, b.request_throughput);
  add("output throughput (tok/s)", a.output_token_throughput, b.output_token_throughput);
  add("goodput (req/s)", a.goodput, b.goodput);
  const std::pair<const char*, const Summary RunMetrics::*> metrics[] = {
      {"TTFT", &RunMetrics::ttft_ms},
      {"TPOT", &RunMetrics::tpot_ms},
      {"ITL", &RunMetrics::itl_ms},
      {"E2E", &RunMetrics::e2e_ms},
      {"queue", &RunMetrics::queue_ms}};
  for (const auto& [name, field] : metrics) {
    add(absl::StrCat(name, " mean (ms)"), (a.*field).mean, (b.*field).mean);
    add(absl::StrCat(name, " p50 (ms)"), (a.*field).p50, (b.*field).p50);
    add(absl::StrCat(name, " p99 (ms)"), (a.*field).p99, (b.*field).p99);
  }
  return rows;
}

bool IsApiPair(const PhaseReport& grpc, const PhaseReport& http) {
  return grpc.api == "grpc" && http.api == "openai" && grpc.open_loop == http.open_loop &&
         grpc.concurrency == http.concurrency && grpc.request_rate == http.request_rate;
}

ApiRatios ApiCompareRatios(const PhaseReport& grpc, const PhaseReport& http) {
  auto ratio = [](double a, double b) { return a != 0 ? b / a : 0; };
  return {ratio(grpc.metrics.tpot_ms.p50, http.metrics.tpot_ms.p50),
          ratio(grpc.metrics.output_token_throughput, http.metrics.output_token_throughput)};
}

std::string FormatTable(const SessionResult& res) {
  std::string out;
  absl::StrAppend(&out, "saturn-load: ", res.workload.empty() ? "no workload" : res.workload, "\n");
  if (!res.workload_adjustment.empty()) {
    absl::StrAppend(&out, "  note: ", res.workload_adjustment, "\n");
  }
  for (const TargetInfo& t : res.targets) {
    absl::StrAppend(&out, "  target ", t.target, ": model ", t.info.model().name(), ", backend ",
                    t.info.backend().name(), " (", t.info.backend().device_name(), ")\n");
  }
  for (const HttpTargetReport& t : res.http_targets) {
    absl::StrAppend(&out, "  target ", t.url, " (OpenAI-compatible API): model ", t.model, "\n");
  }
  if (!res.diagnosis_skipped.empty()) absl::StrAppend(&out, "  ", res.diagnosis_skipped, "\n");
  for (const PhaseReport& p : res.phases) Block(res, p, &out);
  if (res.phases.size() > 1) Sweep(res, &out);
  if (res.compare) Compare(res, &out);
  absl::StrAppend(&out,
                  "\npercentiles: linear interpolation (numpy's default); warm-up: requests "
                  "sent before the warmup_requests-th completion are run, not measured\n");
  absl::StrAppend(&out, PlainConclusion(res));
  return out;
}

ProgressPrinter::ProgressPrinter(FILE* out, bool tty, const LoadConfig& config,
                                 double plain_every_s)
    : out_(out),
      tty_(tty),
      num_requests_(config.num_requests),
      duration_s_(config.duration_s),
      plain_every_s_(plain_every_s) {}

std::string ProgressPrinter::Line(const PhaseReport& phase, const Progress& p) const {
  std::string count =
      num_requests_ > 0 ? absl::StrCat(p.sent, "/", num_requests_) : absl::StrCat(p.sent);
  return absl::StrFormat("%s: sent %s  done %d  errors %d  in flight %d  %.1f s%s", phase.label,
                         count, p.completed, p.errors, p.in_flight, p.elapsed_s,
                         p.sending_done ? "  (draining)" : "");
}

void ProgressPrinter::PhaseStarted(const PhaseReport& phase) {
  next_plain_s_ = plain_every_s_;
  last_ = Progress();
  if (!tty_) std::fprintf(out_, "%s: started\n", phase.label.c_str());
  std::fflush(out_);
}

void ProgressPrinter::Update(const PhaseReport& phase, const Progress& p) {
  last_ = p;
  if (tty_) {
    double frac = 0;
    if (num_requests_ > 0) frac = static_cast<double>(p.completed + p.errors) / num_requests_;
    if (duration_s_ > 0) frac = std::max(frac, p.elapsed_s / duration_s_);
    frac = std::clamp(frac, 0.0, 1.0);
    const int width = 24, filled = static_cast<int>(frac * width);
    std::fprintf(out_, "\r[%s%s] %3d%% %s\x1b[K", std::string(filled, '#').c_str(),
                 std::string(width - filled, '.').c_str(), static_cast<int>(frac * 100),
                 Line(phase, p).c_str());
  } else if (p.elapsed_s >= next_plain_s_) {
    std::fprintf(out_, "%s\n", Line(phase, p).c_str());
    next_plain_s_ = p.elapsed_s + plain_every_s_;
  }
  std::fflush(out_);
}

void ProgressPrinter::PhaseFinished(const PhaseReport& phase) {
  if (tty_) std::fprintf(out_, "\r\x1b[K");
  std::fprintf(out_, "%s: finished: %lld completed, %lld errors in %.1f s\n", phase.label.c_str(),
               static_cast<long long>(phase.metrics.completed),
               static_cast<long long>(phase.metrics.errors), phase.outcome.elapsed_s);
  std::fflush(out_);
}

}  // namespace saturn::clients
