// PollGovernor (poll_governor.h).
#include "kernels/cpu/poll_governor.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>

namespace saturn::cpu {

SchedWait ReadThreadSchedWait() {
  SchedWait w;
  const int fd = open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return w;
  char buf[128];
  const ssize_t n = read(fd, buf, sizeof(buf) - 1);
  close(fd);
  if (n <= 0) return w;
  buf[n] = '\0';
  // "run_ns wait_ns timeslices"
  char* end = nullptr;
  const long long run = std::strtoll(buf, &end, 10);
  if (end == buf) return w;
  char* end2 = nullptr;
  const long long wait = std::strtoll(end, &end2, 10);
  if (end2 == end) return w;
  w.run_ns = run;
  w.wait_ns = wait;
  w.available = true;
  return w;
}

int64_t PollGovernor::SpinUs(int64_t now_ns) {
  if (spin_us_ <= 0 || unavailable_ || now_ns < backoff_until_ns_) return 0;
  if (has_base_ && now_ns - base_ns_ < kIntervalNs) return spin_us_;
  const SchedWait w = reader_();
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
