#include "engine/measure/step_record.h"

#include <algorithm>
#include <cmath>

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

StepRing::StepRing(size_t capacity, size_t ops_capacity)
    : capacity_(std::max<size_t>(capacity, 1)),
      ops_capacity_(std::min(ops_capacity == 0 ? capacity_ : ops_capacity, capacity_)),
      chunk_(std::min<size_t>(512, capacity_)) {
  open_.reserve(chunk_);
}

void StepRing::Push(StepRecord r) {
  std::vector<OpRecord> ops = std::move(r.ops);
  r.ops = {};
  std::lock_guard<std::mutex> lock(mu_);
  ++total_;
  ops_.emplace_back(r.step_id, std::move(ops));
  while (ops_.size() > ops_capacity_) ops_.pop_front();
  open_.push_back(std::move(r));
  ++size_;
  if (open_.size() == chunk_) {
    sealed_.push_back(std::make_shared<const Chunk>(std::move(open_)));
    open_ = Chunk();
    open_.reserve(chunk_);
  }
  // The open chunk never holds more than capacity_ records, so the oldest is in a sealed one.
  while (size_ > capacity_) {
    --size_;
    Evict((*sealed_.front())[head_]);
    if (++head_ == sealed_.front()->size()) {
      sealed_.pop_front();
      head_ = 0;
    }
  }
}

void StepRing::Evict(const StepRecord& r) {
  const double label = std::floor(r.start_us / kSumIntervalUs) * kSumIntervalUs;
  if (evicted_.empty() || evicted_.back().first != label) {
    evicted_.emplace_back(label, StepSums());
    while (evicted_.size() > kSumSeconds) {
      evicted_dropped_through_ = evicted_.front().first;
      evicted_.pop_front();
    }
  }
  evicted_.back().second.Add(r, any_evicted_ ? &last_evicted_ : nullptr);
  last_evicted_ = r;
  any_evicted_ = true;
}

size_t StepRing::View::size() const {
  size_t n = open.size();
  for (const auto& c : sealed) n += c->size();
  return n - head;
}

const StepRecord& StepRing::View::at(size_t i) const {
  i += head;
  for (const auto& c : sealed) {
    if (i < c->size()) return (*c)[i];
    i -= c->size();
  }
  return open[i];
}

std::vector<StepRecord> StepRing::View::CopyFrom(size_t from) const {
  std::vector<StepRecord> out;
  const size_t n = size();
  if (from >= n) return out;
  out.reserve(n - from);
  size_t skip = from + head;
  for (const auto& c : sealed) {
    if (skip >= c->size()) {
      skip -= c->size();
      continue;
    }
    out.insert(out.end(), c->begin() + static_cast<std::ptrdiff_t>(skip), c->end());
    skip = 0;
  }
  out.insert(out.end(), open.begin() + static_cast<std::ptrdiff_t>(skip), open.end());
  return out;
}

size_t StepRing::View::FirstFrom(double since_us) const {
  // Steps start in order: binary search for the first at or after since_us.
  size_t lo = 0, hi = size();
  while (lo < hi) {
    const size_t mid = (lo + hi) / 2;
    if (at(mid).start_us < since_us) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo;
}

StepRing::View StepRing::Snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  return SnapshotLocked();
}

StepRing::View StepRing::SnapshotLocked() const {
  View v;
  v.sealed.assign(sealed_.begin(), sealed_.end());
  v.head = head_;
  v.open = open_;
  return v;
}

void StepRing::AttachOps(std::vector<StepRecord>* out) const {
  if (out->empty()) return;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = std::lower_bound(
      ops_.begin(), ops_.end(), out->front().step_id,
      [](const std::pair<int64_t, std::vector<OpRecord>>& e, int64_t id) { return e.first < id; });
  for (StepRecord& r : *out) {
    while (it != ops_.end() && it->first < r.step_id) ++it;
    if (it != ops_.end() && it->first == r.step_id) r.ops = it->second;
  }
}

std::vector<StepRecord> StepRing::Last(size_t n) const {
  const View v = Snapshot();
  const size_t size = v.size();
  std::vector<StepRecord> out = v.CopyFrom(size - std::min(n, size));
  AttachOps(&out);
  return out;
}

std::vector<StepRecord> StepRing::Since(double since_us) const {
  std::vector<StepRecord> out = WindowFrom(since_us, 0);
  AttachOps(&out);
  return out;
}

std::vector<StepRecord> StepRing::WindowFrom(double since_us, size_t before) const {
  const View v = Snapshot();
  const size_t lo = v.FirstFrom(since_us);
  return v.CopyFrom(lo - std::min(before, lo));
}

std::vector<StepRecord> StepRing::WindowWithEvicted(double since_us, double until_us, size_t before,
                                                    EvictedSums* earlier) const {
  *earlier = EvictedSums();
  View v;
  {
    std::lock_guard<std::mutex> lock(mu_);
    v = SnapshotLocked();
    const bool reaches = size_ > 0 && v.at(0).start_us <= since_us;
    if (any_evicted_ && !reaches && last_evicted_.end_us <= until_us) {
      // From the first whole second at or after since_us, or the oldest second still kept.
      double begin = std::ceil(since_us / kSumIntervalUs) * kSumIntervalUs;
      earlier->complete = evicted_dropped_through_ < begin;
      if (!earlier->complete) begin = evicted_dropped_through_ + kSumIntervalUs;
      earlier->begin_us = begin;
      for (const auto& [label, sums] : evicted_) {
        if (label >= begin) earlier->sums.Merge(sums);
      }
      // The gap before the window's first step began before the window: not the window's.
      earlier->sums.loop_gap_us -= earlier->sums.lead_gap_us;
      earlier->sums.lead_gap_us = 0;
    }
  }
  // No evicted step in the window: the records alone, from since_us.
  if (earlier->sums.steps == 0) *earlier = EvictedSums();
  const double from = earlier->sums.steps > 0 ? earlier->begin_us : since_us;
  const size_t lo = v.FirstFrom(from);
  return v.CopyFrom(lo - std::min(before, lo));
}

void StepRing::Clear() {
  std::lock_guard<std::mutex> lock(mu_);
  evicted_.clear();
  evicted_dropped_through_ = -1;
  any_evicted_ = false;
  sealed_.clear();
  head_ = 0;
  open_.clear();
  ops_.clear();
  size_ = 0;
}

int64_t StepRing::total_steps() const {
  std::lock_guard<std::mutex> lock(mu_);
  return total_;
}

size_t StepRing::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return size_;
}

}  // namespace saturn
