// Whether an idle pool worker may poll for the next job: while the worker polls, its governor
// measures over kIntervalNs the share of its runnable time it waited for a core (schedstat);
// above kMaxWaitShare it stops polling for a back-off (kMinBackoffNs, doubling while contention
// lasts, at most kMaxBackoffNs). Where schedstat cannot be read the worker never polls. Why, and
// what polling gains: docs/CPU.md, "Threads".
#pragma once

#include <cstdint>

#include "kernels/schedstat.h"

namespace saturn::cpu {

class PollGovernor {
 public:
  static constexpr int64_t kIntervalNs = 20'000'000;  // 20 ms between checks
  static constexpr double kMaxWaitShare = 0.2;        // of runnable time, waiting
  // A transient stretch of contention (OpenBLAS's threads spin ~0.1 s after each call; the
  // planner's probes and calibration make such calls at start-up) then costs a tenth of a
  // second of sleeping workers, not a whole second: with 1 s, the first decode timed right
  // after calibration ran slower than the ones that followed (docs/CPU.md).
  static constexpr int64_t kMinBackoffNs = 100'000'000;    // 0.1 s
  static constexpr int64_t kMaxBackoffNs = 8'000'000'000;  // 8 s

  using Reader = SchedStat (*)();
  // spin_us: how long a worker polls after a job while polling is allowed (0: never polls).
  explicit PollGovernor(int64_t spin_us, Reader reader = &ReadThreadSchedStat)
      : spin_us_(spin_us), reader_(reader) {}

  // How long to poll now (0: sleep at once). Reads schedstat at most once per interval.
  int64_t SpinUs(int64_t now_ns);
  int64_t backoffs() const { return backoffs_; }

 private:
  const int64_t spin_us_;
  const Reader reader_;
  bool unavailable_ = false;
  bool has_base_ = false;  // base_ns_ / base_ hold the current interval's start
  int64_t base_ns_ = 0;
  SchedStat base_;
  int64_t backoff_until_ns_ = 0, backoff_ns_ = kMinBackoffNs, backoffs_ = 0;
};

}  // namespace saturn::cpu
