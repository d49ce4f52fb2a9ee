#include "engine/step_record.h"

#include <algorithm>

namespace saturn {

double StepRecord::total_flops() const {
  double f = 0;
  for (const OpClassStats& c : by_class) f += c.flops;
  return f;
}

double StepRecord::total_bytes() const {
  double b = 0;
  for (const OpClassStats& c : by_class) b += c.bytes;
  return b;
}

void StepRing::Push(StepRecord r) {
  std::lock_guard<std::mutex> lock(mu_);
  records_.push_back(std::move(r));
  ++total_;
  while (records_.size() > capacity_) records_.pop_front();
}

std::vector<StepRecord> StepRing::Last(size_t n) const {
  std::lock_guard<std::mutex> lock(mu_);
  const size_t k = std::min(n, records_.size());
  return std::vector<StepRecord>(records_.end() - static_cast<std::ptrdiff_t>(k), records_.end());
}

std::vector<StepRecord> StepRing::Since(double since_us) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<StepRecord> out;
  for (const StepRecord& r : records_) {
    if (r.start_us >= since_us) out.push_back(r);
  }
  return out;
}

std::vector<StepRecord> StepRing::WindowFrom(double since_us, size_t before) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto first = std::find_if(records_.begin(), records_.end(),
                            [since_us](const StepRecord& r) { return r.start_us >= since_us; });
  first -=
      static_cast<std::ptrdiff_t>(std::min(before, static_cast<size_t>(first - records_.begin())));
  std::vector<StepRecord> out;
  out.reserve(static_cast<size_t>(records_.end() - first));
  for (auto it = first; it != records_.end(); ++it) {
    out.push_back(*it);
    out.back().ops.clear();
  }
  return out;
}

void StepRing::Clear() {
  std::lock_guard<std::mutex> lock(mu_);
  records_.clear();
}

int64_t StepRing::total_steps() const {
  std::lock_guard<std::mutex> lock(mu_);
  return total_;
}

}  // namespace saturn
