// UtilizationSampler: a reading every interval, a bounded deque, a mean over a window.
#include "server/diag/utilization_sampler.h"

#include <algorithm>

#include "kernels/base/clock.h"

namespace saturn {

UtilizationSampler::UtilizationSampler(std::function<double()> read, absl::Duration interval,
                                       size_t capacity)
    : read_(std::move(read)), interval_(interval), capacity_(std::max<size_t>(capacity, 1)) {}

UtilizationSampler::~UtilizationSampler() { Stop(); }

bool UtilizationSampler::Start() {
  if (thread_.joinable()) return true;
  const double first = read_();
  if (first < 0) return false;
  Add(NowUs(), first);
  thread_ = std::thread([this] { Run(); });
  return true;
}

void UtilizationSampler::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void UtilizationSampler::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!cv_.wait_for(lock, absl::ToChronoMilliseconds(interval_), [this] { return stopping_; })) {
    lock.unlock();
    const double share = read_();  // outside the lock: NVML may take a while
    if (share >= 0) Add(NowUs(), share);
    lock.lock();
  }
}

void UtilizationSampler::Add(double time_us, double share) {
  std::lock_guard<std::mutex> lock(mu_);
  readings_.emplace_back(time_us, std::clamp(share, 0.0, 1.0));
  while (readings_.size() > capacity_) readings_.pop_front();
}

double UtilizationSampler::MeanPercent(double begin_us, double end_us) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto first = std::lower_bound(readings_.begin(), readings_.end(), begin_us,
                                [](const auto& r, double t) { return r.first < t; });
  double sum = 0;
  int n = 0;
  for (auto it = first; it != readings_.end() && it->first <= end_us; ++it, ++n) sum += it->second;
  return n > 0 ? 100.0 * sum / n : -1;
}

}  // namespace saturn
