// DiagnosticsSession: the calibration in force, the window rule, reports, and the plan ->
// applied -> tracked loop. What drives a live engine is in diagnostics_session_engine.cc.
#include "engine/diag/diagnostics_session.h"

#include <algorithm>
#include <iostream>
#include <utility>

#include "kernels/base/clock.h"

namespace saturn {
namespace {

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
WindowEdges FitWindow(const WindowInput& input, std::vector<StepRecord>* steps, double* begin_us,
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
  const double running = input.in_flight_since_us;
  if (running > 0 && running < end_us && running > last_start) {
    e.busy_us += end_us - std::max(running, *begin_us);
    e.in_flight = true;
  }
  bool idle = steps->empty() && !e.in_flight;  // unless a step overlaps the window's start
  double recent_wall = 0;
  bool inside_a_step = false;  // the window lies within one recorded step
  const std::vector<StepRecord> last = input.Last(kMinSteps + 2);
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
    std::vector<StepRecord> recent = input.Last(steps->size() + kMinSteps + 2);
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
  std::vector<StepRecord> prev = input.Last(1);
  if (n == 0 && !prev.empty() && prev.back().end_us <= end_us && prev.back().end_us > *begin_us &&
      prev.back().start_us < *begin_us) {
    e.busy_us += prev.back().end_us - *begin_us;
  } else if (n > 0) {
    // The ring is ordered: the step before the window's first one is the candidate.
    std::vector<StepRecord> tail = input.Last(n + 8);
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

void DiagnosticsSession::StartOffline(const Calibration& calibration) {
  std::lock_guard<std::mutex> lock(mu_);
  calibration_ = calibration;
}

double DiagnosticsSession::calibration_age_s() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (!calibration_ || calibration_->measured_unix_s <= 0) return -1;
  return std::max(0.0, UnixNowSeconds() - calibration_->measured_unix_s);
}

bool DiagnosticsSession::calibration_suspect(std::string* reason) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (reason != nullptr) *reason = suspect_reason_;
  return suspect_;
}

std::optional<Calibration> DiagnosticsSession::calibration() const {
  std::lock_guard<std::mutex> lock(mu_);
  return calibration_;
}

double DiagnosticsSession::calibration_ms() const {
  std::lock_guard<std::mutex> lock(mu_);
  return calibration_ms_;
}

DiagnosticsReport DiagnosticsSession::BuildReport(const WindowInput& input,
                                                  std::vector<StepRecord>* steps_out) {
  double begin_us = input.begin_us;
  const double end_us = input.end_us;
  AnalyzerContext ctx = input.context;
  double truncated_from_s = 0;
  const EvictedSums& earlier = input.earlier;
  const bool summed = earlier.sums.steps > 0 && earlier.begin_us >= begin_us &&
                      earlier.begin_us < end_us && earlier.sums.last_end_us <= end_us;
  if (summed) {
    // The records start after the window's start: the ring's per-second sums of the steps it
    // evicted stand for them, from the first whole second of the window (or the oldest second
    // it still keeps); the note says how much of the asked span that covers.
    truncated_from_s = (end_us - begin_us) * 1e-6;
    begin_us = earlier.begin_us;
    ctx.earlier = earlier.sums;
    ctx.earlier_cut = !earlier.complete;
  }
  std::vector<StepRecord> steps = input.Since(begin_us);
  // The ring forgot the window's start and has no sums for it (a recording without them):
  // analyse only what it still holds, rather than count the forgotten steps as idle time.
  if (!summed && input.ring_total_steps > static_cast<int64_t>(input.ring_capacity) &&
      steps.size() >= input.ring_capacity && !steps.empty() && steps.front().start_us > begin_us) {
    truncated_from_s = (end_us - begin_us) * 1e-6;
    begin_us = steps.front().start_us;
  }
  const WindowEdges edges = FitWindow(input, &steps, &begin_us, end_us);
  ctx.truncated_from_s = truncated_from_s;
  ctx.ring_steps = input.ring_capacity;
  ctx.edge_busy_us = edges.busy_us;
  ctx.step_in_flight = edges.in_flight;
  ctx.widened_from_s = edges.widened_from_s;
  const Calibration cal = calibration().value_or(Calibration{});
  DiagnosticsReport report = Analyze(steps, begin_us, end_us, cal, ctx);
  report.tracked = tracker_.Evaluate(steps);
  {
    std::lock_guard<std::mutex> lock(mu_);
    const CalibrationCheck& check = report.verdict.calibration_check;
    if (check.suspect && !suspect_) {
      suspect_ = true;
      suspect_reason_ = check.notes.empty() ? std::string() : check.notes.front();
      std::cerr << log_name_ << ": calibration suspect: " << suspect_reason_ << "\n";
    }
    if (!report.plan.actions.empty()) {
      recent_.push_front(RecentPlan{report.plan, report.model, ctx});
      if (recent_.size() > kRecentPlans) recent_.pop_back();
    }
  }
  if (steps_out != nullptr) *steps_out = std::move(steps);
  return report;
}

void DiagnosticsSession::OnOptionsApplied(const EngineOptions& before, const EngineOptions& after,
                                          double applied_us) {
  if (before == after) return;  // nothing changed: keep what is tracked
  std::lock_guard<std::mutex> lock(mu_);
  for (const RecentPlan& p : recent_) {
    for (const Action& a : p.plan.actions) {
      // A restart action (weights quantized) leaves the options as they were: an options
      // change cannot be it, and this process never serves its weights.
      if (a.options_after != after || !a.restart_flags.empty()) continue;
      tracker_.RecordApplied(a, p.model, p.ctx, p.plan.context, applied_us, p.plan.curve);
      std::cerr << log_name_ << ": tracking plan action \"" << a.what << "\"\n";
      return;
    }
  }
  tracker_.Clear();
}

bool DiagnosticsSession::TrackAction(const Action& action, double applied_us) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const RecentPlan& p : recent_) {
    for (const Action& a : p.plan.actions) {
      if (a.kind != action.kind || a.what != action.what || !a.restart_flags.empty()) continue;
      tracker_.RecordApplied(a, p.model, p.ctx, p.plan.context, applied_us, p.plan.curve);
      return true;
    }
  }
  return false;
}

}  // namespace saturn
