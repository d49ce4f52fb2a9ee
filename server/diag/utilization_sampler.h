// The device's own busy figure (NVML's utilization.gpu on CUDA) over a report's window. NVML
// reports the share of its last sample period (1/6 s to 1 s) in which a kernel ran, so one
// reading at report time says what that last moment did (the first H200 run's reports read
// "NVML 1 %" after a load that nvidia-smi had seen at 62-94 %). The sampler reads it every
// `interval` on a thread of its own and keeps the readings, so that a report averages the ones
// taken inside its window, as nvidia-smi's samples over that time would. It starts only where
// the first reading succeeds (no thread on the CPU backend). Thread-safe.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>

#include "absl/time/time.h"

namespace saturn {

class UtilizationSampler {
 public:
  // `read` returns the device's busy share in [0, 1], or < 0 when it cannot be read. At most
  // `capacity` readings are kept (the oldest go first).
  UtilizationSampler(std::function<double()> read, absl::Duration interval, size_t capacity);
  ~UtilizationSampler();  // Stop()
  UtilizationSampler(const UtilizationSampler&) = delete;
  UtilizationSampler& operator=(const UtilizationSampler&) = delete;

  // Takes a first reading; where it succeeds, keeps sampling on a thread until Stop. Returns
  // whether it is sampling.
  bool Start();
  void Stop();  // idempotent
  // Keeps a reading taken at `time_us` (the engine's clock, kernels/base/clock.h).
  void Add(double time_us, double share);
  // Mean of the readings taken in [begin_us, end_us], as a percentage; -1 when there are none.
  double MeanPercent(double begin_us, double end_us) const;

 private:
  void Run();

  std::function<double()> read_;
  absl::Duration interval_;
  size_t capacity_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<double, double>> readings_;  // (time_us, share), in time order
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace saturn
