// Timed trials that survive a busy machine: how calibration measures one ceiling.
//
// A measurement is a series of trials; each trial repeats one unit of work (say one GEMM)
// until it has run at least `min_trial_s`, and yields a rate (work per second). On a shared
// machine another process can take the cores in the middle of a trial; two defences:
//  - best-of-N with a stability criterion: trials continue (from `min_trials` up to
//    `max_trials`) until the best two agree within `tolerance`; the spread (best - median) /
//    best is reported beside the best.
//  - contention correction (CPU backend): the kernel's per-thread scheduler statistics
//    (/proc/self/task/*/schedstat: time on CPU, time runnable but waiting for a CPU) give the
//    CPU time the process's threads really ran during the trial. The work over that CPU time
//    shared by the `threads` that do it (work x threads / run time) is the rate the cores
//    deliver while they are ours, whatever share of the wall clock another process took.
//    That errs high where the threads share a core (SMT: one thread running alone does more
//    per CPU-second than two together; measured here 60 vs 42 GFLOP/s quiet). The wall time
//    scaled by the share run / (run + wait) errs low (a thread done early sleeps rather than
//    waits). The trial's rate is the larger of the plain wall-clock rate and the smaller of
//    the two corrections; run / (run + wait) is reported as how contended the trial was.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace saturn {

struct TrialOptions {
  double min_trial_s = 0.04;  // each trial runs the unit at least this long
  int min_trials = 3;
  int max_trials = 8;
  double tolerance = 0.05;         // the best two trials agree within this share
  bool correct_contention = true;  // rate from the threads' CPU time (CPU backends)
  int threads = 1;                 // threads that do the unit's work (the backend's pool)
  double max_series_s = 1.5;       // stop adding trials once a series has run this long
  double warmup_s = 0;             // run the unit untimed this long first (clocks ramping)
};

struct TrialSeries {
  double best = 0;       // best rate (contention-corrected when enabled)
  double median = 0;     // median rate
  double spread = 0;     // (best - median) / best
  double best_wall = 0;  // best rate on wall time alone (no correction)
  double run_share = 1;  // mean share of runnable time the threads ran (1: uncontended)
  int trials = 0;
  bool stable = false;           // the best two agreed within the tolerance
  double warmup_s = 0;           // how long the unit ran untimed before the trials
  std::string Describe() const;  // "best of 5 (stable, spread 2.1%, threads ran 64% ...)"
};

// Runnable-time counters of every thread of this process (nanoseconds); zeros where the
// kernel does not expose schedstat.
struct SchedTimes {
  double run_ns = 0;
  double wait_ns = 0;
  bool available = false;
};
SchedTimes ReadSchedTimes();

// Runs `unit` (which must finish its work before returning, device synchronised) in trials;
// `work_per_unit` is what one call does (FLOPs, bytes). One warm-up call is not timed.
absl::StatusOr<TrialSeries> RunTrials(const std::function<absl::Status()>& unit,
                                      double work_per_unit, const TrialOptions& opt);

}  // namespace saturn
