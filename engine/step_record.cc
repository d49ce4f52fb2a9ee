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
    if (++head_ == sealed_.front()->size()) {
      sealed_.pop_front();
      head_ = 0;
    }
  }
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

StepRing::View StepRing::Snapshot() const {
  View v;
  std::lock_guard<std::mutex> lock(mu_);
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
  // Steps start in order: binary search for the first at or after since_us.
  size_t lo = 0, hi = v.size();
  while (lo < hi) {
    const size_t mid = (lo + hi) / 2;
    if (v.at(mid).start_us < since_us) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return v.CopyFrom(lo - std::min(before, lo));
}

void StepRing::Clear() {
  std::lock_guard<std::mutex> lock(mu_);
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
