// The kernel's scheduler counters (/proc/.../schedstat): how long a thread ran and how long it
// was runnable but waited for a CPU. The one reader of them: the CPU pool's PollGovernor reads
// its own thread's, calibration trials and the diagnostics sum the process's threads (their
// run share: run / (run + wait)). Zeros and available = false where Linux does not expose them.
// The kernel folds a running thread's current slice in at ticks and when it stops running, so a
// read while running can lag by up to a tick.
#pragma once

#include <cstdint>
#include <vector>

namespace saturn {

struct SchedStat {
  int64_t run_ns = 0;   // cumulative time on a CPU
  int64_t wait_ns = 0;  // cumulative time runnable but waiting for a CPU
  bool available = false;
};

// One schedstat file (its first two fields).
SchedStat ReadSchedStat(const char* path);
// The calling thread's counters (/proc/thread-self/schedstat).
SchedStat ReadThreadSchedStat();
// Summed over every thread of this process (/proc/self/task/*/schedstat).
SchedStat ReadProcessSchedStat();
// The calling thread's kernel id (gettid).
int CurrentThreadId();

// The summed counters of a fixed set of this process's threads, read often and cheaply: each
// file stays open and a read is one pread per thread (about 0.6 us each on Linux 6). A
// thread whose file cannot be opened is left out; none tracked: available = false. Not
// thread-safe; the owner reads it.
class ThreadSchedSet {
 public:
  ThreadSchedSet() = default;
  ~ThreadSchedSet();
  ThreadSchedSet(const ThreadSchedSet&) = delete;
  ThreadSchedSet& operator=(const ThreadSchedSet&) = delete;

  // Starts tracking thread `tid` of this process (once: a tracked tid is left as it is);
  // false if its counters cannot be read.
  bool Track(int tid);
  SchedStat Read() const;

 private:
  std::vector<int> tids_, fds_;  // side by side
};

}  // namespace saturn
