// The one clock of Saturn's events, timings and step records: steady-clock time since an
// arbitrary epoch (the same in every thread of the process). Engine, backends, diagnostics and
// server all read it here, so their timestamps compare. UnixNowSeconds is the wall clock, for
// the few values that say when something happened (a calibration, a probe), never for durations.
#pragma once

#include <chrono>

namespace saturn {

inline double NowUs() {
  return std::chrono::duration<double, std::micro>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

inline double NowSeconds() { return NowUs() * 1e-6; }

// Seconds since the Unix epoch (system clock; may jump when the host's time is set).
inline double UnixNowSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace saturn
