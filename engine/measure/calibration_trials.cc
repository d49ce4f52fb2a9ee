// Trials for calibration: best-of-N, stability, contention correction (calibration_trials.h).
#include "engine/measure/calibration_trials.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_format.h"
#include "kernels/base/clock.h"
#include "kernels/schedstat.h"

namespace saturn {
SchedTimes ReadSchedTimes() {
  const SchedStat s = ReadProcessSchedStat();
  return {double(s.run_ns), double(s.wait_ns), s.available};
}

std::string TrialSeries::Describe() const {
  return absl::StrFormat(
      "best of %d trials (%s, spread %.1f%%%s%s)", trials, stable ? "stable" : "NOT stable",
      100 * spread,
      warmup_s >= 0.05 ? absl::StrFormat(", after %.1f s warm-up", warmup_s) : std::string(),
      run_share < 0.97 ? absl::StrFormat(", threads ran %.0f%% of their runnable time: "
                                         "rated by their CPU time, wall-clock best %.3g",
                                         100 * run_share, best_wall)
                       : std::string());
}

absl::StatusOr<TrialSeries> RunTrials(const std::function<absl::Status()>& unit,
                                      double work_per_unit, const TrialOptions& opt) {
  TrialSeries out;
  const double warmup_start = NowSeconds();
  do {
    if (absl::Status s = unit(); !s.ok()) return s;  // warm-up
    out.warmup_s = NowSeconds() - warmup_start;
  } while (out.warmup_s < opt.warmup_s);
  std::vector<double> rates;
  double share_sum = 0;
  const int max_trials = std::max(opt.max_trials, std::max(opt.min_trials, 1));
  const double series_start = NowSeconds();
  for (int t = 0; t < max_trials; ++t) {
    if (t >= std::max(opt.min_trials, 1) && NowSeconds() - series_start > opt.max_series_s) break;
    const SchedTimes s0 = opt.correct_contention ? ReadSchedTimes() : SchedTimes{};
    const double t0 = NowSeconds();
    int units = 0;
    double wall = 0;
    do {
      if (absl::Status s = unit(); !s.ok()) return s;
      ++units;
      wall = NowSeconds() - t0;
    } while (wall < opt.min_trial_s);
    const double work = work_per_unit * units;
    double rate = work / wall;
    double share = 1;
    if (opt.correct_contention) {
      const SchedTimes s1 = ReadSchedTimes();
      const double run = s1.run_ns - s0.run_ns, wait = s1.wait_ns - s0.wait_ns;
      if (s0.available && s1.available && run > 0 && wait >= 0) {
        share = run / (run + wait);
        // Two corrections, each wrong in a known direction; the smaller is kept. Work per
        // CPU-second x threads errs high where the threads are SMT siblings (one running alone
        // is faster per thread than two together); wall / share errs low (a thread done early
        // sleeps instead of waiting). The quiet-machine rate lies between them.
        const double by_cpu = work * std::max(opt.threads, 1) / (run * 1e-9);
        const double by_share = work / (wall * share);
        rate = std::max(rate, std::min(by_cpu, by_share));
      }
    }
    share_sum += share;
    out.best_wall = std::max(out.best_wall, work / wall);
    rates.push_back(rate);
    if (int(rates.size()) >= std::max(opt.min_trials, 2)) {
      std::vector<double> sorted = rates;
      std::sort(sorted.begin(), sorted.end(), std::greater<>());
      if (sorted[1] >= (1 - opt.tolerance) * sorted[0]) {
        out.stable = true;
        break;
      }
    }
  }
  std::vector<double> sorted = rates;
  std::sort(sorted.begin(), sorted.end());
  out.trials = int(rates.size());
  out.best = sorted.back();
  out.median = sorted[sorted.size() / 2];
  out.spread = out.best > 0 ? (out.best - out.median) / out.best : 0;
  out.run_share = share_sum / out.trials;
  return out;
}

}  // namespace saturn
