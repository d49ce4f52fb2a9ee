#include "engine/step_record.h"

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

void StepRing::Clear() {
  std::lock_guard<std::mutex> lock(mu_);
  records_.clear();
}

int64_t StepRing::total_steps() const {
  std::lock_guard<std::mutex> lock(mu_);
  return total_;
}

}  // namespace saturn
