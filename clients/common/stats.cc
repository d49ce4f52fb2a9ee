// Per-run figures from per-request records (see stats.h for the definitions and the
// warm-up rule). No I/O, no clock.
#include "clients/common/stats.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "absl/strings/str_format.h"

namespace saturn::clients {

double RequestRecord::ttft_s() const {
  return token_times_s.empty() ? -1 : token_times_s.front() - send_s;
}

double RequestRecord::e2e_s() const { return (has_final ? final_s : end_s) - send_s; }

double RequestRecord::tpot_s() const {
  if (output_tokens < 2 || token_times_s.empty()) return -1;
  return (token_times_s.back() - token_times_s.front()) / (output_tokens - 1);
}

double Percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const double rank = std::clamp(p, 0.0, 100.0) / 100.0 * static_cast<double>(values.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(rank));
  const size_t hi = std::min(lo + 1, values.size() - 1);
  const double frac = rank - static_cast<double>(lo);
  return values[lo] + frac * (values[hi] - values[lo]);
}

Summary Summarize(const std::vector<double>& values) {
  Summary s;
  s.count = static_cast<int64_t>(values.size());
  if (values.empty()) return s;
  s.mean = std::accumulate(values.begin(), values.end(), 0.0) / static_cast<double>(s.count);
  s.p50 = Percentile(values, 50);
  s.p90 = Percentile(values, 90);
  s.p99 = Percentile(values, 99);
  auto [mn, mx] = std::minmax_element(values.begin(), values.end());
  s.min = *mn;
  s.max = *mx;
  return s;
}

namespace {

// The send time before which requests count as warm-up (-inf: none).
double WarmupEnd(const std::vector<RequestRecord>& records, int warmup_requests) {
  if (warmup_requests <= 0) return -INFINITY;
  std::vector<double> ends;
  for (const RequestRecord& r : records) {
    if (r.ok()) ends.push_back(r.end_s);
  }
  std::sort(ends.begin(), ends.end());
  if (static_cast<int64_t>(ends.size()) <= warmup_requests) return -INFINITY;
  const double cut = ends[warmup_requests - 1];
  // Keep the rule only if some completed request was sent at or after the cut.
  for (const RequestRecord& r : records) {
    if (r.ok() && r.send_s >= cut) return cut;
  }
  return -INFINITY;
}

StabilityCheck CheckStability(const std::vector<RequestRecord>& records, double warmup_end) {
  StabilityCheck c;
  double first_send = INFINITY, last_send = -INFINITY;
  for (const RequestRecord& r : records) {
    first_send = std::min(first_send, r.send_s);
    last_send = std::max(last_send, r.send_s);
  }
  // The load stays at its level past the last send until the next completion (a closed loop
  // has every slot full when it stops sending).
  double held_until = INFINITY;
  for (const RequestRecord& r : records) {
    if (r.end_s >= last_send) held_until = std::min(held_until, r.end_s);
  }
  c.span_start_s = std::isfinite(warmup_end) ? warmup_end : first_send;
  c.span_end_s = std::isfinite(held_until) ? held_until : last_send;
  const double span = c.span_end_s - c.span_start_s;
  if (!(span >= StabilityCheck::kMinStabilitySpanS)) {
    c.note = absl::StrFormat("load held for %.2f s after warm-up, under %.2f s: too short to judge",
                             std::max(0.0, span), StabilityCheck::kMinStabilitySpanS);
    return c;
  }
  const double window = span / 3;
  std::vector<double> tokens(3, 0);
  int64_t total = 0;
  for (const RequestRecord& r : records) {
    for (size_t i = 0; i < r.token_times_s.size(); ++i) {
      const double t = r.token_times_s[i];
      if (t < c.span_start_s || t >= c.span_end_s) continue;
      const int w = std::clamp(static_cast<int>((t - c.span_start_s) / window), 0, 2);
      const int n = i < r.token_counts.size() ? r.token_counts[i] : 1;
      tokens[w] += n;
      total += n;
    }
  }
  c.span_tokens = total;
  if (total < StabilityCheck::kMinStabilityTokens) {
    c.note = absl::StrFormat("%d output tokens while the load was held, under %d: too few to judge",
                             total, StabilityCheck::kMinStabilityTokens);
    return c;
  }
  double mean = 0;
  for (double n : tokens) {
    c.window_output_throughput.push_back(n / window);
    mean += n / window / 3;
  }
  c.stable = mean > 0;
  for (double x : c.window_output_throughput) {
    if (std::abs(x - mean) > 0.1 * mean) c.stable = false;
  }
  return c;
}

}  // namespace

RunMetrics ComputeMetrics(const std::vector<RequestRecord>& records, const MetricsOptions& opts) {
  RunMetrics m;
  m.sent = static_cast<int64_t>(records.size());
  if (records.empty()) return m;
  double first_send = INFINITY, last_end = -INFINITY;
  for (const RequestRecord& r : records) {
    first_send = std::min(first_send, r.send_s);
    last_end = std::max(last_end, r.end_s);
    if (r.ok()) {
      ++m.completed;
    } else {
      ++m.errors;
      ++m.errors_by_code[r.status];
    }
  }
  m.run_duration_s = std::max(0.0, last_end - first_send);

  const double cut = WarmupEnd(records, opts.warmup_requests);
  m.stability = CheckStability(records, cut);
  std::vector<const RequestRecord*> measured;
  for (const RequestRecord& r : records) {
    if (r.send_s < cut) {
      ++m.warmup_excluded;
    } else if (r.ok()) {
      measured.push_back(&r);
    }
  }
  m.measured = static_cast<int64_t>(measured.size());
  if (measured.empty()) return m;

  std::vector<double> ttft, tpot, itl, e2e, queue;
  m.window_start_s = INFINITY;
  m.window_end_s = -INFINITY;
  for (const RequestRecord* r : measured) {
    m.window_start_s = std::min(m.window_start_s, r->send_s);
    m.window_end_s = std::max(m.window_end_s, r->end_s);
    m.output_tokens += r->output_tokens;
    m.input_tokens += r->prompt_tokens;
    const double t = r->ttft_s(), p = r->tpot_s();
    if (t >= 0) ttft.push_back(t * 1e3);
    if (p >= 0) tpot.push_back(p * 1e3);
    for (size_t i = 1; i < r->token_times_s.size(); ++i) {
      itl.push_back((r->token_times_s[i] - r->token_times_s[i - 1]) * 1e3);
    }
    e2e.push_back(r->e2e_s() * 1e3);
    if (r->server_queue_ms >= 0) queue.push_back(r->server_queue_ms);
    const bool ttft_ok = opts.slo_ttft_ms <= 0 || (t >= 0 && t * 1e3 <= opts.slo_ttft_ms);
    // A request with one token has no TPOT and so cannot break a TPOT SLO.
    const bool tpot_ok = opts.slo_tpot_ms <= 0 || p < 0 || p * 1e3 <= opts.slo_tpot_ms;
    if (ttft_ok && tpot_ok) ++m.good_requests;
  }
  m.window_s = m.window_end_s - m.window_start_s;
  if (m.window_s > 0) {
    m.request_throughput = static_cast<double>(m.measured) / m.window_s;
    m.output_token_throughput = static_cast<double>(m.output_tokens) / m.window_s;
    m.input_token_throughput = static_cast<double>(m.input_tokens) / m.window_s;
    m.goodput = static_cast<double>(m.good_requests) / m.window_s;
  }
  m.good_fraction = static_cast<double>(m.good_requests) / static_cast<double>(m.measured);
  m.ttft_ms = Summarize(ttft);
  m.tpot_ms = Summarize(tpot);
  m.itl_ms = Summarize(itl);
  m.e2e_ms = Summarize(e2e);
  m.queue_ms = Summarize(queue);
  return m;
}

}  // namespace saturn::clients
