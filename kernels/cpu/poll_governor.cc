// PollGovernor (poll_governor.h).
#include "kernels/cpu/poll_governor.h"

#include <algorithm>

namespace saturn::cpu {

int64_t PollGovernor::SpinUs(int64_t now_ns) {
  if (spin_us_ <= 0 || unavailable_ || now_ns < backoff_until_ns_) return 0;
  if (has_base_ && now_ns - base_ns_ < kIntervalNs) return spin_us_;
  const SchedStat w = reader_();
  if (!w.available) {
    unavailable_ = true;  // cannot see contention: never poll
    return 0;
  }
  if (has_base_) {
    const double wait = double(w.wait_ns - base_.wait_ns);
    const double runnable = double(w.run_ns - base_.run_ns) + wait;
    if (runnable > 0 && wait / runnable > kMaxWaitShare) {
      ++backoffs_;
      backoff_until_ns_ = now_ns + backoff_ns_;
      backoff_ns_ = std::min(2 * backoff_ns_, kMaxBackoffNs);
      has_base_ = false;  // the next check measures from the end of the back-off
      return 0;
    }
    backoff_ns_ = kMinBackoffNs;
  }
  has_base_ = true;  // the next interval starts here
  base_ns_ = now_ns;
  base_ = w;
  return spin_us_;
}

}  // namespace saturn::cpu
