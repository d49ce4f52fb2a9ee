// JSON and CSV writers (see run_table.h). The JSON holds the settings, the servers, every
// per-phase figure the table shows (same names as RunMetrics), the API each phase drove, the
// comparison rows (CUDA graphs, or gRPC vs HTTP with the TPOT and throughput ratios), each
// request's record (without its per-token times) and the outcome.
#include <cmath>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "clients/load/run_table.h"
#include "kernels/base/json_depth.h"

namespace saturn::clients {
namespace {

using nlohmann::json;

json RateJson(double r) { return std::isinf(r) ? json("inf") : json(r); }

json SummaryJson(const Summary& s) {
  return {{"count", s.count}, {"mean", s.mean}, {"p50", s.p50}, {"p90", s.p90},
          {"p99", s.p99},     {"min", s.min},   {"max", s.max}};
}

json SettingsJson(const LoadConfig& c) {
  json rates = json::array();
  for (double r : c.request_rate) rates.push_back(RateJson(r));
  return {{"api", c.api},
          {"target", c.target},
          {"model_name", c.model_name},
          {"diag_target", c.diag_target},
          {"openai_target", c.openai_target},
          {"mode", c.open_loop() ? "open" : "closed"},
          {"concurrency", c.open_loop() ? json::array() : json(c.concurrency)},
          {"request_rate", rates},
          {"num_requests", c.num_requests},
          {"duration_s", c.duration_s},
          {"min_measure_s", c.min_measure_s},
          {"prefix_len", c.prefix_len},
          {"input_len", c.prompts.empty() ? c.input_len.ToString() : ""},
          {"output_len", c.output_len.ToString()},
          {"prompts", c.prompts},
          {"seed", c.seed},
          {"temperature", c.temperature},
          {"ignore_eos", c.ignore_eos},
          {"warmup_requests", c.warmup_requests},
          {"slo_ttft_ms", c.slo_ttft_ms},
          {"slo_tpot_ms", c.slo_tpot_ms},
          {"compare", c.compare},
          {"follow_plan", c.follow_plan},
          {"connect_timeout_s", c.connect_timeout_s},
          {"request_timeout_s", c.request_timeout_s},
          {"max_errors", c.max_errors},
          {"percentile_method", "linear interpolation between closest ranks (numpy default)"},
          {"warmup_rule",
           "requests sent before the warmup_requests-th completion are run but not measured"}};
}

// --follow_plan's comparison (null on a phase that followed nothing).
json FollowedJson(const PhaseReport& p) {
  if (!p.followed.has_value()) return json();
  const FollowedPlan& f = *p.followed;
  return {{"action", f.action},
          {"kind", f.kind},
          {"options_sent", f.change},
          {"metric", f.metric},
          {"predicted", f.predicted},
          {"measured", f.measured},
          {"delivered_output_tokens_per_s", f.delivered},
          {"error", f.error},
          {"error_percent", 100 * f.error},
          {"expected_error", f.expected_error},
          {"untrusted", f.untrusted},
          {"outside_measured", f.outside_measured},
          {"note", f.note}};
}

json PhaseJson(const PhaseReport& p) {
  const RunMetrics& m = p.metrics;
  json windows = json::array();
  for (const ServerWindow& w : p.windows) {
    windows.push_back({{"target_index", w.target_index},
                       {"peer", w.peer},
                       {"start_us", w.start_us},
                       {"end_us", w.end_us},
                       {"last_s", w.last_s}});
  }
  json diagnoses = json::array();
  for (const std::string& d : p.diagnoses) {
    json parsed = JsonNestingDepth(d) <= kMaxFileJsonDepth ? json::parse(d, nullptr, false)
                                                           : json(json::value_t::discarded);
    diagnoses.push_back(parsed.is_discarded() ? json(d) : parsed);
  }
  json requests = json::array();
  for (const RequestRecord& r : p.outcome.records) {
    requests.push_back({{"index", r.index},
                        {"send_s", r.send_s},
                        {"end_s", r.end_s},
                        {"status", r.status},
                        {"error", r.error_message},
                        {"ttft_ms", r.ttft_s() >= 0 ? json(r.ttft_s() * 1e3) : json()},
                        {"tpot_ms", r.tpot_s() >= 0 ? json(r.tpot_s() * 1e3) : json()},
                        {"e2e_ms", r.e2e_s() * 1e3},
                        {"queue_ms", r.server_queue_ms >= 0 ? json(r.server_queue_ms) : json()},
                        {"prompt_tokens", r.prompt_tokens},
                        {"output_tokens", r.output_tokens},
                        {"peer", r.peer}});
  }
  return {
      {"label", p.label},
      {"api", p.api},
      {"target", p.target},
      {"mode", p.open_loop ? "open" : "closed"},
      {"concurrency", p.open_loop ? json() : json(p.concurrency)},
      {"request_rate", p.open_loop ? RateJson(p.request_rate) : json()},
      {"cuda_graphs", p.cuda_graphs < 0 ? json() : json(p.cuda_graphs == 1)},
      {"warmup_requests", p.warmup_requests},
      {"start_unix_s", p.outcome.start_unix_s},
      {"elapsed_s", p.outcome.elapsed_s},
      {"stop_reason", p.outcome.stop_reason},
      {"measure_note", p.outcome.measure_note},
      {"sent", m.sent},
      {"completed", m.completed},
      {"errors", m.errors},
      {"errors_by_code", m.errors_by_code},
      {"warmup_excluded", m.warmup_excluded},
      {"measured", m.measured},
      {"run_duration_s", m.run_duration_s},
      {"window_start_s", m.window_start_s},
      {"window_end_s", m.window_end_s},
      {"window_s", m.window_s},
      {"request_throughput", m.request_throughput},
      {"output_token_throughput", m.output_token_throughput},
      {"input_token_throughput", m.input_token_throughput},
      {"output_tokens", m.output_tokens},
      {"input_tokens", m.input_tokens},
      {"good_requests", m.good_requests},
      {"goodput", m.goodput},
      {"good_fraction", m.good_fraction},
      {"good_percent", m.good_fraction * 100},
      {"stable", m.stability.stable},
      {"stability",
       {{"span_start_s", m.stability.span_start_s},
        {"span_end_s", m.stability.span_end_s},
        {"span_s", m.stability.span_end_s - m.stability.span_start_s},
        {"span_tokens", m.stability.span_tokens},
        {"min_span_s", StabilityCheck::kMinStabilitySpanS},
        {"min_span_tokens", StabilityCheck::kMinStabilityTokens},
        {"window_output_throughput", m.stability.window_output_throughput},
        {"note", m.stability.note}}},
      {"ttft_ms", SummaryJson(m.ttft_ms)},
      {"tpot_ms", SummaryJson(m.tpot_ms)},
      {"itl_ms", SummaryJson(m.itl_ms)},
      {"e2e_ms", SummaryJson(m.e2e_ms)},
      {"queue_ms", SummaryJson(m.queue_ms)},
      {"server_windows", windows},
      {"diagnosis", diagnoses},
      {"diagnosis_note", p.diagnosis_note},
      {"follow_note", p.follow_note},
      {"followed_plan", FollowedJson(p)},
      {"requests", requests},
  };
}

absl::Status WriteText(const std::string& path, const std::string& text, const char* flag) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) return absl::InvalidArgumentError(absl::StrCat(flag, ": cannot write ", path));
  f << text;
  f.close();
  if (!f) return absl::InternalError(absl::StrCat(flag, ": error while writing ", path));
  return absl::OkStatus();
}

std::string N(double x) { return absl::StrFormat("%.9g", x); }

std::string Csv(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string q = "\"";
  for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}

}  // namespace

json SessionToJson(const SessionResult& res) {
  json targets = json::array();
  for (const TargetInfo& t : res.targets) {
    const v1::ServerInfo& i = t.info;
    targets.push_back({{"target", t.target},
                       {"resolved", t.resolved},
                       {"model", i.model().name()},
                       {"num_parameters", i.model().num_parameters()},
                       {"backend", i.backend().name()},
                       {"device", i.backend().device_name()},
                       {"compute_dtype", i.backend().compute_dtype()},
                       {"supports_cuda_graphs", i.backend().supports_cuda_graphs()},
                       {"event_threads", i.backend().event_threads()},
                       {"async_scheduling", i.backend().async_scheduling()},
                       {"max_num_seqs", i.options().max_num_seqs()},
                       {"max_num_batched_tokens", i.options().max_num_batched_tokens()},
                       {"cuda_graphs", i.options().cuda_graphs()},
                       {"max_model_len", i.limits().max_model_len()},
                       {"kv_blocks", i.kv_cache().num_blocks()}});
  }
  json http_targets = json::array();
  for (const HttpTargetReport& t : res.http_targets) {
    http_targets.push_back(
        {{"url", t.url}, {"model", t.model}, {"max_model_len", t.max_model_len}});
  }
  json phases = json::array();
  for (const PhaseReport& p : res.phases) phases.push_back(PhaseJson(p));
  json comparison = json::array();
  for (size_t i = 0; res.config.compare_api() && i + 1 < res.phases.size(); i += 2) {
    const PhaseReport& grpc = res.phases[i];
    const PhaseReport& http = res.phases[i + 1];
    if (!IsApiPair(grpc, http)) continue;
    json rows = json::array();
    for (const CompareRow& r : CompareRows(grpc, http)) {
      rows.push_back({{"metric", r.name}, {"grpc", r.off}, {"openai", r.on}, {"ratio", r.ratio}});
    }
    const ApiRatios q = ApiCompareRatios(grpc, http);
    comparison.push_back({{"kind", "api"},
                          {"grpc", grpc.label},
                          {"openai", http.label},
                          {"tpot_p50_ratio", q.tpot_p50},
                          {"output_token_throughput_ratio", q.output_throughput},
                          {"rows", rows}});
  }
  for (size_t i = 0; res.compare && i + 1 < res.phases.size(); i += 2) {
    if (res.phases[i].cuda_graphs != 0 || res.phases[i + 1].cuda_graphs != 1) continue;
    json rows = json::array();
    for (const CompareRow& r : CompareRows(res.phases[i], res.phases[i + 1])) {
      rows.push_back({{"metric", r.name}, {"off", r.off}, {"on", r.on}, {"ratio", r.ratio}});
    }
    comparison.push_back({{"kind", "cuda_graphs"},
                          {"off", res.phases[i].label},
                          {"on", res.phases[i + 1].label},
                          {"rows", rows}});
  }
  return {{"tool", "saturn-load"},
          {"format_version", 1},
          {"settings", SettingsJson(res.config)},
          {"workload", res.workload},
          {"workload_adjustment", res.workload_adjustment},
          {"balanced_uri", res.balanced_uri},
          {"targets", targets},
          {"http_targets", http_targets},
          {"diagnosis_skipped", res.diagnosis_skipped},
          {"phases", phases},
          {"comparison", comparison},
          {"exit_code", res.exit_code},
          {"error", res.error}};
}

absl::Status WriteJson(const SessionResult& res, const std::string& path) {
  return WriteText(path, SessionToJson(res).dump(2) + "\n", "--json");
}

std::string FormatCsv(const SessionResult& res) {
  const LoadConfig& c = res.config;
  std::vector<std::string> head = {"label",
                                   "mode",
                                   "concurrency",
                                   "request_rate",
                                   "cuda_graphs",
                                   "api",
                                   "target",
                                   "input_len",
                                   "output_len",
                                   "prompts",
                                   "seed",
                                   "num_requests",
                                   "duration_s",
                                   "slo_ttft_ms",
                                   "slo_tpot_ms",
                                   "warmup_requests",
                                   "sent",
                                   "completed",
                                   "errors",
                                   "errors_by_code",
                                   "warmup_excluded",
                                   "measured",
                                   "run_duration_s",
                                   "window_s",
                                   "request_throughput",
                                   "output_token_throughput",
                                   "input_token_throughput",
                                   "goodput",
                                   "good_fraction",
                                   "stable",
                                   "stop_reason"};
  for (const char* m : {"ttft_ms", "tpot_ms", "itl_ms", "e2e_ms", "queue_ms"}) {
    for (const char* s : {"mean", "p50", "p90", "p99", "min", "max", "count"}) {
      head.push_back(absl::StrCat(m, "_", s));
    }
  }
  std::string out = absl::StrJoin(head, ",") + "\n";
  for (const PhaseReport& p : res.phases) {
    const RunMetrics& m = p.metrics;
    std::vector<std::string> errs;
    for (const auto& [code, n] : m.errors_by_code) errs.push_back(absl::StrCat(code, ":", n));
    std::vector<std::string> row = {
        Csv(p.label),
        p.open_loop ? "open" : "closed",
        p.open_loop ? "" : absl::StrCat(p.concurrency),
        p.open_loop ? (std::isinf(p.request_rate) ? "inf" : N(p.request_rate)) : "",
        p.cuda_graphs < 0 ? "" : (p.cuda_graphs ? "on" : "off"),
        p.api,
        Csv(absl::StrJoin(absl::StrSplit(p.target, ','), " ")),
        c.prompts.empty() ? c.input_len.ToString() : "",
        c.output_len.ToString(),
        Csv(c.prompts),
        absl::StrCat(c.seed),
        absl::StrCat(c.num_requests),
        N(c.duration_s),
        N(c.slo_ttft_ms),
        N(c.slo_tpot_ms),
        absl::StrCat(p.warmup_requests),
        absl::StrCat(m.sent),
        absl::StrCat(m.completed),
        absl::StrCat(m.errors),
        Csv(absl::StrJoin(errs, " ")),
        absl::StrCat(m.warmup_excluded),
        absl::StrCat(m.measured),
        N(m.run_duration_s),
        N(m.window_s),
        N(m.request_throughput),
        N(m.output_token_throughput),
        N(m.input_token_throughput),
        N(m.goodput),
        N(m.good_fraction),
        m.stability.stable ? "1" : "0",
        Csv(p.outcome.stop_reason)};
    for (const Summary* s : {&m.ttft_ms, &m.tpot_ms, &m.itl_ms, &m.e2e_ms, &m.queue_ms}) {
      for (double v : {s->mean, s->p50, s->p90, s->p99, s->min, s->max}) {
        row.push_back(N(v));
      }
      row.push_back(absl::StrCat(s->count));
    }
    absl::StrAppend(&out, absl::StrJoin(row, ","), "\n");
  }
  return out;
}

absl::Status WriteCsv(const SessionResult& res, const std::string& path) {
  return WriteText(path, FormatCsv(res), "--csv");
}

}  // namespace saturn::clients
