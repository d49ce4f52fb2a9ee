// DiagnosticsSession's side that drives a live engine: calibration and probe steps at start
// and on Recalibrate, re-probing after an options change, and capturing a report's input. Apart
// from diagnostics_session.cc so that an offline reader (saturn-diag analyze) links no engine.
#include <algorithm>
#include <iostream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/diag/diagnostics_session.h"
#include "engine/diag/engine_context.h"

namespace saturn {
namespace {

// Steps kept ahead of the window's first: the one straddling its start, and the few a short
// window widens back to (FitWindow in diagnostics_session.cc).
constexpr size_t kStepsBefore = 8;

}  // namespace

absl::Status DiagnosticsSession::Start(Engine* engine, const CalibrationSource& source) {
  Calibration cal;
  double ms = 0;
  if (source.given.has_value()) {
    cal = *source.given;
  } else {
    CalibrationOptions options = ModelCalibrationOptions(*engine);
    options.quick = source.quick;
    absl::StatusOr<Calibration> measured = engine->Calibrate(options, &ms);
    if (!measured.ok()) return measured.status();
    cal = std::move(*measured);
    cal.source = "measured";
  }
  std::cerr << absl::StrFormat(
      "%s: calibration (%s): GEMM %.1f GFLOP/s, bandwidth %.1f GB/s, dispatch %.2f us/op%s%s\n",
      log_name_, cal.source, cal.gemm_flops_per_s / 1e9, cal.bandwidth_bytes_per_s / 1e9,
      cal.op_dispatch_us,
      cal.allreduce_bytes_per_s > 0
          ? absl::StrFormat(", all-reduce %.1f us + bus bytes at %.1f GB/s",
                            cal.allreduce_latency_us, cal.allreduce_bytes_per_s / 1e9)
          : std::string(),
      ms > 0 ? absl::StrFormat(", measured in %.0f ms", ms) : std::string());
  if (!cal.stable) {
    std::cerr << log_name_
              << ": warning: calibration trials did not agree (busy machine?): " << cal.gemm_method
              << "; " << cal.bandwidth_method << "\n";
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    calibration_ = std::move(cal);
    calibration_ms_ = ms;
    last_sched_ = ReadSchedTimes();
  }
  probe_ms_ = source.probe_ms;
  ProbeSteps(engine);
  return absl::OkStatus();
}

StepProbeOptions DiagnosticsSession::ProbeOptions(const Engine& engine) const {
  StepProbeOptions o;
  o.budget_ms = probe_ms_;
  o.max_batch = engine.info().max_num_seqs_limit;  // every batch a plan may propose
  o.max_prefill_tokens = engine.options().max_num_batched_tokens;
  return o;
}

void DiagnosticsSession::ProbeSteps(Engine* engine) {
  if (probe_ms_ <= 0) return;
  RunProbe(engine, ProbeOptions(*engine), "");
}

void DiagnosticsSession::ReprobeAfterOptions(Engine* engine, const EngineOptions& before,
                                             const EngineOptions& after) {
  const std::optional<StepProbe> probe = engine->step_probe();
  if (probe_ms_ <= 0 || !probe.has_value()) return;
  const std::optional<StepProbeOptions> o =
      ReprobeAfter(before, after, *probe, ProbeOptions(*engine));
  if (!o.has_value()) return;
  RunProbe(engine, *o,
           absl::StrFormat(" (again after UpdateEngineOptions: %s)",
                           o->max_batch > 0 ? "cuda_graphs switched"
                                            : absl::StrCat("prefill chunks over ",
                                                           o->min_prefill_tokens, " tokens")));
}

void DiagnosticsSession::RunProbe(Engine* engine, const StepProbeOptions& o,
                                  const std::string& why) {
  absl::StatusOr<StepProbe> p = engine->ProbeSteps(o);
  if (!p.ok()) {
    std::cerr << log_name_
              << ": warning: probe steps failed (plans use served steps only): " << p.status()
              << "\n";
    return;
  }
  // The largest decode batches also timed right after a prefill chunk and at the long context.
  int after_prefill = 0, long_context = 0;
  for (const ProbeSeries& s : p->series) {
    if (s.after_prefill) after_prefill = std::max(after_prefill, s.rows);
    if (AtLongContext(*p, s)) long_context = std::max(long_context, s.rows);
  }
  int other_graphs = 0;
  for (const ProbeSeries& s : p->other_graphs) other_graphs = std::max(other_graphs, s.rows);
  const std::string other =
      other_graphs > 0
          ? absl::StrFormat(", 1-%d with CUDA graphs %s", other_graphs, p->graphs ? "off" : "on")
          : "";
  std::cerr << absl::StrFormat(
      "%s: probe steps%s: decode batch 1-%d (context %d; 1-%d also after a prefill chunk, 1-%d "
      "at context %d%s), prefill up to %d tokens, in %.0f ms%s\n",
      log_name_, why, p->max_batch, p->decode_context, after_prefill, long_context, p->long_context,
      other, p->max_prefill_tokens, p->took_ms,
      p->truncated ? " (larger sizes left out: --probe_steps_ms budget or KV cache)" : "");
}

absl::StatusOr<Calibration> DiagnosticsSession::Recalibrate(Engine* engine) {
  const CalibrationOptions options = ModelCalibrationOptions(*engine);
  double ms = 0;
  absl::StatusOr<Calibration> measured = engine->Calibrate(options, &ms);
  if (!measured.ok()) return measured.status();
  measured->source = "measured";
  std::cerr << absl::StrFormat(
      "%s: recalibrated: GEMM %.1f GFLOP/s, bandwidth %.1f GB/s, dispatch %.2f us/op, in %.0f "
      "ms%s\n",
      log_name_, measured->gemm_flops_per_s / 1e9, measured->bandwidth_bytes_per_s / 1e9,
      measured->op_dispatch_us, ms, measured->stable ? "" : " (trials did not agree)");
  {
    std::lock_guard<std::mutex> lock(mu_);
    calibration_ = *measured;
    calibration_ms_ = ms;
    suspect_ = false;
    suspect_reason_.clear();
  }
  ProbeSteps(engine);  // the step times may have moved with the ceilings
  return measured;
}

WindowInput DiagnosticsSession::Capture(const Engine& engine, double begin_us, double end_us) {
  WindowInput in;
  in.begin_us = begin_us;
  in.end_us = end_us;
  const StepRing& ring = engine.steps();
  in.steps = ring.WindowWithEvicted(begin_us, end_us, kStepsBefore, &in.earlier);
  in.ring_total_steps = ring.total_steps();
  in.ring_capacity = ring.capacity();
  in.in_flight_since_us = engine.step_in_flight_since_us();
  in.context = ContextFromEngine(engine);
  // Tensor parallelism: the workers' logs of the window's steps, read between two steps. A
  // group that cannot answer leaves the split unknown; the report still has rank 0's records.
  if (engine.info().tensor_parallel > 1) {
    absl::StatusOr<TpStats> tp = engine.TensorParallelStats(begin_us, end_us);
    if (tp.ok()) in.context.tp = *std::move(tp);
  }
  // Contention since the previous capture: how much of their runnable time the server's
  // threads ran (other processes holding the cores make every kernel look slow).
  const SchedTimes now = ReadSchedTimes();
  std::lock_guard<std::mutex> lock(mu_);
  const double run = now.run_ns - last_sched_.run_ns, wait = now.wait_ns - last_sched_.wait_ns;
  if (now.available && last_sched_.available && run > 0 && wait >= 0) {
    in.context.run_share = run / (run + wait);
  }
  last_sched_ = now;
  return in;
}

DiagnosticsReport DiagnosticsSession::BuildReport(const Engine& engine, double begin_us,
                                                  double end_us,
                                                  std::vector<StepRecord>* steps_out) {
  return BuildReport(Capture(engine, begin_us, end_us), steps_out);
}

}  // namespace saturn
