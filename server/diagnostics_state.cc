// DiagnosticsState: calibration at start, reports, and the plan -> applied -> tracked loop.
#include "server/diagnostics_state.h"

#include <algorithm>
#include <chrono>
#include <iostream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/diag/engine_context.h"
#include "server/diagnostics_request.h"

namespace saturn {
namespace {

double UnixNow() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

struct WindowEdges {
  double busy_us = 0;  // overlap of steps not wholly inside the window
  bool in_flight = false;
  double widened_from_s = 0;
};

// Keeps the steps wholly inside [*begin_us, end_us]; counts the overlap of a step that
// straddles either edge (or still runs) as busy; widens the window back to the last
// kMinSteps complete steps when it holds fewer and lasts less than kMinSteps recent steps (a
// window shorter than a few steps). A window
// in which the engine did nothing at all (no step inside, running or ending in it) is idle,
// not short: it is never widened back to steps from before it.
WindowEdges FitWindow(const Engine& engine, std::vector<StepRecord>* steps, double* begin_us,
                      double end_us) {
  constexpr size_t kMinSteps = 3;
  WindowEdges e;
  double last_start = steps->empty() ? 0 : steps->back().start_us;
  for (const StepRecord& r : *steps) {
    if (r.end_us > end_us && r.start_us < end_us) {  // finished after the window's end
      e.busy_us += end_us - r.start_us;
      e.in_flight = true;
    }
  }
  std::erase_if(*steps, [end_us](const StepRecord& r) { return r.end_us > end_us; });
  const double running = engine.step_in_flight_since_us();
  if (running > 0 && running < end_us && running > last_start) {
    e.busy_us += end_us - std::max(running, *begin_us);
    e.in_flight = true;
  }
  bool idle = steps->empty() && !e.in_flight;  // unless a step overlaps the window's start
  double recent_wall = 0;
  bool inside_a_step = false;  // the window lies within one recorded step
  const std::vector<StepRecord> last = engine.steps().Last(kMinSteps + 2);
  for (const StepRecord& r : last) {
    if (r.start_us < end_us && r.end_us > *begin_us) idle = false;
    if (r.start_us <= *begin_us && r.end_us >= end_us) inside_a_step = true;
    recent_wall += r.wall_us();
  }
  // Short means shorter than a few of the engine's recent steps (or inside one of them, even
  // one that ran long beside the others): a long window in which only the tail of a step falls
  // (the engine idle after a load) is idle time, not a short window.
  const bool short_window =
      !last.empty() &&
      (inside_a_step || end_us - *begin_us < kMinSteps * recent_wall / double(last.size()));
  if (steps->size() < kMinSteps && !idle && short_window) {
    // Widen: the last kMinSteps complete steps ending by end_us (the ring permitting).
    std::vector<StepRecord> recent = engine.steps().Last(steps->size() + kMinSteps + 2);
    std::erase_if(recent, [end_us](const StepRecord& r) { return r.end_us > end_us; });
    if (recent.size() > kMinSteps) recent.erase(recent.begin(), recent.end() - kMinSteps);
    if (recent.size() > steps->size() && recent.front().start_us < *begin_us) {
      e.widened_from_s = (end_us - *begin_us) * 1e-6;
      *begin_us = recent.front().start_us;
      *steps = std::move(recent);
      return e;  // the widened window starts at a step: no straddling step at its start
    }
  }
  // A step that started before the window and ended inside it: its overlap is busy.
  const size_t n = steps->size();
  std::vector<StepRecord> prev = engine.steps().Last(1);
  if (n == 0 && !prev.empty() && prev.back().end_us <= end_us && prev.back().end_us > *begin_us &&
      prev.back().start_us < *begin_us) {
    e.busy_us += prev.back().end_us - *begin_us;
  } else if (n > 0) {
    // The ring is ordered: the step before the window's first one is the candidate.
    std::vector<StepRecord> tail = engine.steps().Last(n + 8);
    for (size_t i = 0; i + 1 < tail.size(); ++i) {
      if (tail[i + 1].start_us == steps->front().start_us && tail[i].start_us < *begin_us &&
          tail[i].end_us > *begin_us) {
        e.busy_us += tail[i].end_us - *begin_us;
      }
    }
  }
  return e;
}

}  // namespace

absl::Status DiagnosticsState::InitCalibration(Engine* engine, const ServerConfig& config) {
  Calibration cal;
  double ms = 0;
  if (config.calibration == "file") {
    absl::StatusOr<Calibration> loaded = LoadCalibration(config.calibration_file);
    if (!loaded.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--calibration_file: cannot load \"",
                                                     config.calibration_file,
                                                     "\": ", loaded.status().message()));
    }
    cal = std::move(*loaded);
    cal.source = config.calibration_file;
    const std::string backend = engine->info().backend;
    if (cal.backend != backend) {
      std::cerr << "saturn-server: warning: --calibration_file was measured on backend \""
                << cal.backend << "\", the server runs \"" << backend << "\"\n";
    }
  } else {
    CalibrationOptions options = ModelCalibrationOptions(*engine);
    options.quick = config.calibration == "quick";
    absl::StatusOr<Calibration> measured = engine->Calibrate(options, &ms);
    if (!measured.ok()) {
      return absl::Status(
          measured.status().code(),
          absl::StrCat("--calibration=", config.calibration, ": ", measured.status().message()));
    }
    cal = std::move(*measured);
    cal.source = "measured";
  }
  if (!config.save_calibration.empty()) {
    if (absl::Status s = SaveCalibration(cal, config.save_calibration); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat("--save_calibration: cannot write \"",
                                                 config.save_calibration, "\": ", s.message()));
    }
  }
  std::cerr << absl::StrFormat(
      "saturn-server: calibration (%s): GEMM %.1f GFLOP/s, bandwidth %.1f GB/s, dispatch %.2f "
      "us/op%s\n",
      cal.source, cal.gemm_flops_per_s / 1e9, cal.bandwidth_bytes_per_s / 1e9, cal.op_dispatch_us,
      ms > 0 ? absl::StrFormat(", measured in %.0f ms", ms) : std::string());
  if (!cal.stable) {
    std::cerr << "saturn-server: warning: calibration trials did not agree (busy machine?): "
              << cal.gemm_method << "; " << cal.bandwidth_method << "\n";
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    calibration_ = std::move(cal);
    calibration_ms_ = ms;
    last_sched_ = ReadSchedTimes();
  }
  // Quick (the test suite starts many servers): an eighth, about 190 ms by default.
  probe_ms_ = config.calibration == "quick" ? config.probe_steps_ms / 8 : config.probe_steps_ms;
  ProbeSteps(engine);
  return absl::OkStatus();
}

StepProbeOptions DiagnosticsState::ProbeOptions(const Engine& engine) const {
  StepProbeOptions o;
  o.budget_ms = probe_ms_;
  o.max_batch = engine.info().max_num_seqs_limit;  // every batch a plan may propose
  o.max_prefill_tokens = engine.options().max_num_batched_tokens;
  return o;
}

void DiagnosticsState::ProbeSteps(Engine* engine) {
  if (probe_ms_ <= 0) return;
  RunProbe(engine, ProbeOptions(*engine), "");
}

void DiagnosticsState::ReprobeAfterOptions(Engine* engine, const EngineOptions& before,
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

void DiagnosticsState::RunProbe(Engine* engine, const StepProbeOptions& o, const std::string& why) {
  absl::StatusOr<StepProbe> p = engine->ProbeSteps(o);
  if (!p.ok()) {
    std::cerr << "saturn-server: warning: probe steps failed (plans use served steps only): "
              << p.status() << "\n";
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
      "saturn-server: probe steps%s: decode batch 1-%d (context %d; 1-%d also after a prefill "
      "chunk, 1-%d at context %d%s), prefill up to %d tokens, in %.0f ms%s\n",
      why, p->max_batch, p->decode_context, after_prefill, long_context, p->long_context, other,
      p->max_prefill_tokens, p->took_ms,
      p->truncated ? " (larger sizes left out: --probe_steps_ms budget or KV cache)" : "");
}

absl::StatusOr<Calibration> DiagnosticsState::Recalibrate(Engine* engine) {
  const CalibrationOptions options = ModelCalibrationOptions(*engine);
  double ms = 0;
  absl::StatusOr<Calibration> measured = engine->Calibrate(options, &ms);
  if (!measured.ok()) return measured.status();
  measured->source = "measured";
  std::cerr << absl::StrFormat(
      "saturn-server: recalibrated: GEMM %.1f GFLOP/s, bandwidth %.1f GB/s, dispatch %.2f us/op, "
      "in %.0f ms%s\n",
      measured->gemm_flops_per_s / 1e9, measured->bandwidth_bytes_per_s / 1e9,
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

double DiagnosticsState::calibration_age_s() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (!calibration_ || calibration_->measured_unix_s <= 0) return -1;
  return std::max(0.0, UnixNow() - calibration_->measured_unix_s);
}

bool DiagnosticsState::calibration_suspect(std::string* reason) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (reason != nullptr) *reason = suspect_reason_;
  return suspect_;
}

std::optional<Calibration> DiagnosticsState::calibration() const {
  std::lock_guard<std::mutex> lock(mu_);
  return calibration_;
}

double DiagnosticsState::calibration_ms() const {
  std::lock_guard<std::mutex> lock(mu_);
  return calibration_ms_;
}

DiagnosticsReport DiagnosticsState::BuildReport(const Engine& engine, double begin_us,
                                                double end_us, std::vector<StepRecord>* steps_out) {
  std::vector<StepRecord> steps = engine.steps().Since(begin_us);
  // The ring forgot the window's start: analyse only what it still holds, rather than count
  // the forgotten steps as idle time.
  double truncated_from_s = 0;
  if (engine.steps().total_steps() > static_cast<int64_t>(engine.steps().capacity()) &&
      steps.size() >= engine.steps().capacity() && !steps.empty() &&
      steps.front().start_us > begin_us) {
    truncated_from_s = (end_us - begin_us) * 1e-6;
    begin_us = steps.front().start_us;
  }
  const WindowEdges edges = FitWindow(engine, &steps, &begin_us, end_us);
  AnalyzerContext ctx = ContextFromEngine(engine);
  ctx.truncated_from_s = truncated_from_s;
  ctx.ring_steps = engine.steps().capacity();
  ctx.edge_busy_us = edges.busy_us;
  ctx.step_in_flight = edges.in_flight;
  ctx.widened_from_s = edges.widened_from_s;
  {
    // Contention since the previous report: how much of their runnable time the server's
    // threads ran (other processes holding the cores make every kernel look slow).
    const SchedTimes now = ReadSchedTimes();
    std::lock_guard<std::mutex> lock(mu_);
    const double run = now.run_ns - last_sched_.run_ns, wait = now.wait_ns - last_sched_.wait_ns;
    if (now.available && last_sched_.available && run > 0 && wait >= 0) {
      ctx.run_share = run / (run + wait);
    }
    last_sched_ = now;
  }
  const Calibration cal = calibration().value_or(Calibration{});
  DiagnosticsReport report = Analyze(steps, begin_us, end_us, cal, ctx);
  report.tracked = tracker_.Evaluate(steps);
  {
    std::lock_guard<std::mutex> lock(mu_);
    const CalibrationCheck& check = report.verdict.calibration_check;
    if (check.suspect && !suspect_) {
      suspect_ = true;
      suspect_reason_ = check.notes.empty() ? std::string() : check.notes.front();
      std::cerr << "saturn-server: calibration suspect: " << suspect_reason_ << "\n";
    }
    if (!report.plan.actions.empty()) {
      recent_.push_front(RecentPlan{report.plan, report.model, ctx});
      if (recent_.size() > kRecentPlans) recent_.pop_back();
    }
  }
  if (steps_out != nullptr) *steps_out = std::move(steps);
  return report;
}

void DiagnosticsState::OnOptionsApplied(const EngineOptions& before, const EngineOptions& after,
                                        double applied_us) {
  if (before == after) return;  // nothing changed: keep what is tracked
  std::lock_guard<std::mutex> lock(mu_);
  for (const RecentPlan& p : recent_) {
    for (const Action& a : p.plan.actions) {
      if (a.options_after != after) continue;
      tracker_.RecordApplied(a, p.model, p.ctx, p.plan.context, applied_us, p.plan.curve);
      std::cerr << "saturn-server: tracking plan action \"" << a.what << "\"\n";
      return;
    }
  }
  tracker_.Clear();
}

void DiagnosticsState::StartSampling(const Engine* engine) {
  // One reading every 200 ms, for the longest window a report may ask.
  constexpr absl::Duration kInterval = absl::Milliseconds(200);
  const size_t capacity = static_cast<size_t>(kMaxWindowSeconds * 1000 / 200) + 1;
  utilization_ = std::make_unique<UtilizationSampler>(
      [engine] { return engine->device_utilization(); }, kInterval, capacity);
  utilization_->Start();
}

void DiagnosticsState::StopSampling() {
  if (utilization_ != nullptr) utilization_->Stop();
}

double DiagnosticsState::device_utilization_percent(double begin_us, double end_us) const {
  return utilization_ != nullptr ? utilization_->MeanPercent(begin_us, end_us) : -1;
}

}  // namespace saturn
