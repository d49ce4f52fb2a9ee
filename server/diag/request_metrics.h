// Request-level serving metrics in Prometheus text exposition format 0.0.4, with vLLM's
// names under the "saturn:" prefix: token and request counters and latency histograms fed by
// the Generate streams' final events, and a tokens-per-step histogram fed from the engine's
// step records at scrape time. Thread-safe (one mutex); Observe never blocks beyond it, so the
// engine's event thread may call it.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "engine/measure/step_record.h"
#include "engine/request.h"

namespace saturn {

// A cumulative histogram with fixed upper bounds (the +Inf bucket is implicit).
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds)
      : bounds_(std::move(bounds)), counts_(bounds_.size() + 1) {}
  void Observe(double v);
  // "# HELP", "# TYPE", the _bucket{le=...} lines, _sum and _count.
  void Render(const std::string& name, const std::string& help, std::string* out) const;
  int64_t count() const { return count_; }

 private:
  std::vector<double> bounds_;
  std::vector<int64_t> counts_;  // per bucket, not cumulative; last is +Inf
  double sum_ = 0;
  int64_t count_ = 0;
};

// Exposition helpers: one "# HELP" and "# TYPE" header, then samples. `labels` is the text
// between the braces (e.g. finished_reason="stop"), empty for none.
void AppendHeader(const std::string& name, const std::string& help, const std::string& type,
                  std::string* out);
void AppendSample(const std::string& name, const std::string& labels, double value,
                  std::string* out);

class RequestMetrics {
 public:
  RequestMetrics();
  // A request's final event (any finish reason). The engine's event thread; never blocks beyond the
  // lock.
  void ObserveFinal(const TokenEvent& ev);
  // `tokens` tokens arrived `gap_s` seconds after the request's previous token event: one
  // inter-token latency observation of gap_s / tokens per token (vLLM v1's
  // inter_token_latency_seconds). The engine's event thread.
  void ObserveInterToken(double gap_s, int tokens);
  // One event of a request's stream, as every front feeds it: the inter-token gap since
  // `*last_token_us` (the stream's own, updated here; 0 before its first token) and, on the
  // final event, ObserveFinal. The engine's event thread.
  void ObserveEvent(const TokenEvent& ev, double* last_token_us);
  // Adds the steps in `ring` that ended after the last call to the tokens-per-step histogram
  // (steps the ring dropped between two scrapes are not counted).
  void ObserveSteps(const StepRing& ring);
  // Appends every counter and histogram.
  void Render(std::string* out) const;

 private:
  mutable std::mutex mu_;
  int64_t prompt_tokens_ = 0;
  int64_t generation_tokens_ = 0;
  int64_t preemptions_ = 0;
  std::map<std::string, int64_t> finished_;  // by finished_reason label
  Histogram ttft_;
  Histogram tpot_;  // per request
  Histogram itl_;   // per token
  Histogram e2e_;
  Histogram queue_;
  Histogram iteration_tokens_;
  double last_step_end_us_ = 0;
};

}  // namespace saturn
