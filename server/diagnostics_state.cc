// DiagnosticsState: calibration at start, reports, and the plan -> applied -> tracked loop.
#include "server/diagnostics_state.h"

#include <iostream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/diag/engine_context.h"

namespace saturn {
namespace {

bool SameOptions(const StepOptions& a, const EngineOptions& b) {
  return a.max_num_seqs == b.max_num_seqs && a.max_num_batched_tokens == b.max_num_batched_tokens &&
         a.cuda_graphs == b.cuda_graphs;
}

bool SameOptions(const EngineOptions& a, const EngineOptions& b) {
  return a.max_num_seqs == b.max_num_seqs && a.max_num_batched_tokens == b.max_num_batched_tokens &&
         a.cuda_graphs == b.cuda_graphs;
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
    if (cal.backend != engine->backend().name()) {
      std::cerr << "saturn-server: warning: --calibration_file was measured on backend \""
                << cal.backend << "\", the server runs \"" << engine->backend().name() << "\"\n";
    }
  } else {
    const double t0 = NowUs();
    absl::StatusOr<Calibration> measured = Calibrate(engine->mutable_backend());
    if (!measured.ok()) {
      return absl::Status(measured.status().code(),
                          absl::StrCat("--calibration=measure: ", measured.status().message()));
    }
    ms = (NowUs() - t0) / 1000.0;
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
  std::lock_guard<std::mutex> lock(mu_);
  calibration_ = std::move(cal);
  calibration_ms_ = ms;
  return absl::OkStatus();
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
  if (engine.steps().total_steps() > static_cast<int64_t>(engine.steps().capacity()) &&
      steps.size() >= engine.steps().capacity() && !steps.empty()) {
    begin_us = std::max(begin_us, steps.front().start_us);
  }
  std::erase_if(steps, [end_us](const StepRecord& r) { return r.end_us > end_us; });
  const AnalyzerContext ctx = ContextFromEngine(engine);
  const Calibration cal = calibration().value_or(Calibration{});
  DiagnosticsReport report = Analyze(steps, begin_us, end_us, cal, ctx);
  report.tracked = tracker_.Evaluate(steps);
  {
    std::lock_guard<std::mutex> lock(mu_);
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
  if (SameOptions(before, after)) return;  // nothing changed: keep what is tracked
  std::lock_guard<std::mutex> lock(mu_);
  for (const RecentPlan& p : recent_) {
    for (const Action& a : p.plan.actions) {
      if (!SameOptions(a.options_after, after)) continue;
      tracker_.RecordApplied(a, p.model, p.ctx, p.plan.context, applied_us);
      std::cerr << "saturn-server: tracking plan action \"" << a.what << "\"\n";
      return;
    }
  }
  tracker_.Clear();
}

}  // namespace saturn
