// RequestMetrics: counters, histograms and their exposition text.
#include "server/diag/request_metrics.h"

#include <algorithm>
#include <array>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "kernels/base/enum_table.h"

namespace saturn {
namespace {

// Prometheus float text: integers without a fraction, others with enough digits.
std::string Num(double v) {
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (std::isnan(v)) return "NaN";
  if (v == std::floor(v) && std::fabs(v) < 1e15) return absl::StrFormat("%.0f", v);
  return absl::StrFormat("%.9g", v);
}

// vLLM's finished_reason label values, in FinishReason's order.
const char* ReasonLabel(FinishReason r) {
  static constexpr std::array kLabels{"unknown", "length", "stop", "abort", "error"};
  return EnumLookup(kLabels, r, "unknown");
}

// vLLM's latency buckets (seconds), trimmed.
std::vector<double> LatencyBuckets() {
  return {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,  0.25, 0.5,
          0.75,  1.0,   2.5,  5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0};
}

std::vector<double> TokenBuckets() {
  return {1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384};
}

}  // namespace

void Histogram::Observe(double v) {
  const size_t i = std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin();
  ++counts_[i];
  sum_ += v;
  ++count_;
}

void Histogram::Render(const std::string& name, const std::string& help, std::string* out) const {
  AppendHeader(name, help, "histogram", out);
  int64_t cumulative = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cumulative += counts_[i];
    AppendSample(name + "_bucket", absl::StrCat("le=\"", Num(bounds_[i]), "\""),
                 static_cast<double>(cumulative), out);
  }
  AppendSample(name + "_bucket", "le=\"+Inf\"", static_cast<double>(count_), out);
  AppendSample(name + "_sum", "", sum_, out);
  AppendSample(name + "_count", "", static_cast<double>(count_), out);
}

void AppendHeader(const std::string& name, const std::string& help, const std::string& type,
                  std::string* out) {
  absl::StrAppend(out, "# HELP ", name, " ", help, "\n# TYPE ", name, " ", type, "\n");
}

void AppendSample(const std::string& name, const std::string& labels, double value,
                  std::string* out) {
  if (labels.empty()) {
    absl::StrAppend(out, name, " ", Num(value), "\n");
  } else {
    absl::StrAppend(out, name, "{", labels, "} ", Num(value), "\n");
  }
}

RequestMetrics::RequestMetrics()
    : finished_{{"length", 0}, {"stop", 0}, {"abort", 0}, {"error", 0}},
      ttft_(LatencyBuckets()),
      tpot_(LatencyBuckets()),
      itl_(LatencyBuckets()),
      e2e_(LatencyBuckets()),
      queue_(LatencyBuckets()),
      iteration_tokens_(TokenBuckets()) {}

void RequestMetrics::ObserveFinal(const TokenEvent& ev) {
  if (!ev.final) return;
  const RequestTimings& t = ev.timings;
  std::lock_guard<std::mutex> lock(mu_);
  prompt_tokens_ += ev.usage.prompt_tokens;
  generation_tokens_ += ev.usage.completion_tokens;
  preemptions_ += ev.usage.num_preemptions;
  ++finished_[ReasonLabel(ev.finish_reason)];
  if (ev.finish_reason != FinishReason::kLength && ev.finish_reason != FinishReason::kStop) return;
  if (t.arrival_us <= 0) return;
  if (t.first_scheduled_us > 0) queue_.Observe((t.first_scheduled_us - t.arrival_us) * 1e-6);
  if (t.first_token_us > 0) ttft_.Observe((t.first_token_us - t.arrival_us) * 1e-6);
  if (t.finished_us > 0) e2e_.Observe((t.finished_us - t.arrival_us) * 1e-6);
  if (t.first_token_us > 0 && t.finished_us > 0 && ev.usage.completion_tokens > 1) {
    tpot_.Observe((t.finished_us - t.first_token_us) * 1e-6 / (ev.usage.completion_tokens - 1));
  }
}

void RequestMetrics::ObserveEvent(const TokenEvent& ev, double* last_token_us) {
  if (!ev.token_ids.empty()) {
    if (*last_token_us > 0) {
      ObserveInterToken((ev.time_us - *last_token_us) * 1e-6,
                        static_cast<int>(ev.token_ids.size()));
    }
    *last_token_us = ev.time_us;
  }
  if (ev.final) ObserveFinal(ev);
}

void RequestMetrics::ObserveInterToken(double gap_s, int tokens) {
  if (tokens <= 0 || !(gap_s >= 0)) return;
  std::lock_guard<std::mutex> lock(mu_);
  for (int i = 0; i < tokens; ++i) itl_.Observe(gap_s / tokens);
}

void RequestMetrics::ObserveSteps(const StepRing& ring) {
  double since = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    since = last_step_end_us_;
  }
  // Selected by start: a step starting before `since` ended before it too. Counts only: no
  // per-op records.
  std::vector<StepRecord> steps = ring.WindowFrom(since, 0);
  std::lock_guard<std::mutex> lock(mu_);
  for (const StepRecord& r : steps) {
    if (r.end_us <= last_step_end_us_) continue;
    iteration_tokens_.Observe(r.num_prefill_tokens + r.num_decode_tokens);
    last_step_end_us_ = std::max(last_step_end_us_, r.end_us);
  }
}

void RequestMetrics::Render(std::string* out) const {
  std::lock_guard<std::mutex> lock(mu_);
  AppendHeader("saturn:prompt_tokens_total", "Prompt tokens of finished requests.", "counter", out);
  AppendSample("saturn:prompt_tokens_total", "", static_cast<double>(prompt_tokens_), out);
  AppendHeader("saturn:generation_tokens_total", "Generated tokens of finished requests.",
               "counter", out);
  AppendSample("saturn:generation_tokens_total", "", static_cast<double>(generation_tokens_), out);
  AppendHeader("saturn:num_preemptions_total", "Preemptions of finished requests.", "counter", out);
  AppendSample("saturn:num_preemptions_total", "", static_cast<double>(preemptions_), out);
  AppendHeader("saturn:request_success_total",
               "Finished requests by reason (abort: cancelled; error: failed).", "counter", out);
  for (const auto& [reason, n] : finished_) {
    AppendSample("saturn:request_success_total", absl::StrCat("finished_reason=\"", reason, "\""),
                 static_cast<double>(n), out);
  }
  ttft_.Render("saturn:time_to_first_token_seconds",
               "Arrival to first generated token (finished requests).", out);
  tpot_.Render("saturn:request_time_per_output_token_seconds",
               "Mean time between output tokens of a finished request (one per request).", out);
  itl_.Render("saturn:inter_token_latency_seconds",
              "Time between successive output tokens of a request (one per token).", out);
  e2e_.Render("saturn:e2e_request_latency_seconds", "Arrival to finish (finished requests).", out);
  queue_.Render("saturn:request_queue_time_seconds",
                "Arrival to first scheduled (finished requests).", out);
  iteration_tokens_.Render("saturn:iteration_tokens_total",
                           "Tokens (prefill + decode) per engine step.", out);
}

}  // namespace saturn
