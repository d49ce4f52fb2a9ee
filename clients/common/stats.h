// Per-request records and the per-run figures computed from them: latency summaries
// (mean/p50/p90/p99), throughput, goodput, errors by code, and the steady-state window.
// Pure functions of recorded client timings; never touches the network or the clock, so
// tests can feed known timings and check known answers.
//
// Definitions (the ones vLLM's `bench serve` and genai-perf use):
//   TTFT  first token received - request sent
//   ITL   every gap between consecutive token-carrying messages of one stream
//   TPOT  (last token - first token) / (output tokens - 1), requests with >= 2 tokens
//   E2E   final message received - request sent
//   queue the server's own queue time (GenerateFinal.timings.queue_time_us)
// Percentiles use linear interpolation between closest ranks (numpy's default): the p-th
// percentile of sorted x[0..n-1] is x[i] + f * (x[i+1] - x[i]) with i + f = p/100 * (n-1).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace saturn::clients {

// One request as the client saw it. Times are seconds since the run started (steady clock).
struct RequestRecord {
  int64_t index = 0;                  // order of sending within the run
  double send_s = 0;                  // Generate started
  double end_s = 0;                   // stream finished (status known)
  std::vector<double> token_times_s;  // arrival of each token-carrying message
  std::vector<int> token_counts;      // tokens in each of those messages
  bool has_final = false;             // the final message arrived
  double final_s = 0;                 // when it arrived
  int prompt_tokens = 0;              // from the final message's usage
  int output_tokens = 0;              // tokens received
  double server_queue_ms = -1;        // from the final message (-1: unknown)
  int64_t server_arrival_us = 0;      // server steady clock, from the final message
  int64_t server_finished_us = 0;
  std::string peer;  // the server that answered (grpc peer string)
  // "OK" when the stream ended OK with a normal finish; else a gRPC code name
  // (e.g. "RESOURCE_EXHAUSTED"), "FINISH_ERROR", "FINISH_CANCELLED" or "NO_FINAL".
  std::string status = "OK";
  std::string error_message;

  bool ok() const { return status == "OK"; }
  double ttft_s() const;  // -1 when no token arrived
  double e2e_s() const;
  double tpot_s() const;  // -1 when fewer than 2 tokens
};

struct Summary {
  int64_t count = 0;
  double mean = 0, p50 = 0, p90 = 0, p99 = 0, min = 0, max = 0;
};

// The p-th percentile (0..100) of `values` by linear interpolation; 0 for no values.
double Percentile(std::vector<double> values, double p);
Summary Summarize(const std::vector<double>& values);

struct MetricsOptions {
  // Requests sent before the first `warmup_requests` completions are not measured (see
  // ComputeMetrics). 0: measure everything.
  int warmup_requests = 0;
  double slo_ttft_ms = 0;  // 0: no SLO on TTFT
  double slo_tpot_ms = 0;  // 0: no SLO on TPOT
};

// Whether the load was steady while it was held: the span from the end of the warm-up (the
// first send when nothing is excluded) to the first completion at or after the last send, the
// time during which the closed loop keeps its concurrency (or the open loop its arrival
// process), cut into three equal time windows; the output tokens that arrived in each (from every
// request, warm-up included, as the server produced them) per second of window. Stable when each
// window is within 10 % of their mean (perf_analyzer's stability_percentage over consecutive
// windows). A span under kMinStabilitySpanS or with fewer than kMinStabilityTokens tokens is not
// judged: its rates would be noise. Reported, not used to cut the run (saturn-load's
// --min_measure_s makes each phase long enough).
struct StabilityCheck {
  static constexpr double kMinStabilitySpanS = 0.3;
  static constexpr int64_t kMinStabilityTokens = 30;
  double span_start_s = 0, span_end_s = 0;       // the load-held span
  int64_t span_tokens = 0;                       // output tokens that arrived in the span
  std::vector<double> window_output_throughput;  // output tok/s in each third; empty: not judged
  bool stable = false;
  std::string note;  // why it was not judged ("" when it was)
};

struct RunMetrics {
  // Accounting over every request of the run, warm-up included: sent == completed + errors.
  int64_t sent = 0;
  int64_t completed = 0;
  int64_t errors = 0;
  std::map<std::string, int64_t> errors_by_code;
  double run_duration_s = 0;  // first send to last end

  // Steady state: requests measured and the window they span.
  int64_t warmup_excluded = 0;
  int64_t measured = 0;       // completed requests inside the window
  double window_start_s = 0;  // first measured send
  double window_end_s = 0;    // last measured end
  double window_s = 0;
  double request_throughput = 0;       // measured completions / window_s
  double output_token_throughput = 0;  // their output tokens / window_s
  double input_token_throughput = 0;   // their prompt tokens / window_s
  int64_t output_tokens = 0;
  int64_t input_tokens = 0;
  // Goodput: measured requests that met every SLO set, per second of window (vLLM's
  // definition); good_fraction = good / measured. Without SLOs every completion is good.
  int64_t good_requests = 0;
  double goodput = 0;
  double good_fraction = 0;

  Summary ttft_ms, tpot_ms, itl_ms, e2e_ms, queue_ms;
  StabilityCheck stability;
};

// Warm-up rule: sort requests by send time; the warm-up ends at the end time of the
// `warmup_requests`-th completion (by end time); requests sent before that moment are run
// but excluded from the latency and throughput figures. If that would leave no completed
// request, nothing is excluded.
RunMetrics ComputeMetrics(const std::vector<RequestRecord>& records, const MetricsOptions& opts);

}  // namespace saturn::clients
