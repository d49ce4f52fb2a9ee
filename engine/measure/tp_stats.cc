// Tensor-parallel step logs and their window (tp_stats.h).
#include "engine/measure/tp_stats.h"

#include <algorithm>
#include <cstring>
#include <unordered_map>

namespace saturn {
namespace {

template <typename T>
void Put(std::string* out, T v) {
  out->append(reinterpret_cast<const char*>(&v), sizeof(v));
}

template <typename T>
bool Take(const std::string& in, size_t* at, T* v) {
  if (in.size() - *at < sizeof(T)) return false;
  std::memcpy(v, in.data() + *at, sizeof(T));
  *at += sizeof(T);
  return true;
}

}  // namespace

std::string PackTpLog(const std::vector<TpStepEntry>& entries) {
  std::string out;
  Put<int64_t>(&out, static_cast<int64_t>(entries.size()));
  for (const TpStepEntry& e : entries) {
    Put(&out, e.seq);
    Put(&out, e.start_us);
    Put(&out, e.step_us);
    Put(&out, e.run_us);
    Put(&out, e.wait_us);
    Put<int32_t>(&out, static_cast<int32_t>(e.comm_us.size()));
    for (float d : e.comm_us) Put(&out, d);
  }
  return out;
}

bool UnpackTpLog(const std::string& bytes, std::vector<TpStepEntry>* entries) {
  size_t at = 0;
  int64_t n = 0;
  if (!Take(bytes, &at, &n) || n < 0) return false;
  entries->clear();
  for (int64_t i = 0; i < n; ++i) {
    TpStepEntry e;
    int32_t k = 0;
    if (!Take(bytes, &at, &e.seq) || !Take(bytes, &at, &e.start_us) ||
        !Take(bytes, &at, &e.step_us) || !Take(bytes, &at, &e.run_us) ||
        !Take(bytes, &at, &e.wait_us) || !Take(bytes, &at, &k) || k < 0 ||
        static_cast<size_t>(k) > (bytes.size() - at) / sizeof(float)) {
      return false;
    }
    e.comm_us.resize(k);
    for (float& d : e.comm_us) Take(bytes, &at, &d);
    entries->push_back(std::move(e));
  }
  return at == bytes.size();
}

double TpStats::LoadBalance() const {
  double sum = 0, most = 0;
  for (const TpRankStats& r : per_rank) sum += r.compute_us, most = std::max(most, r.compute_us);
  return most > 0 ? sum / per_rank.size() / most : 1;
}

int TpStats::SlowestRank() const {
  int slowest = 0;
  for (size_t r = 1; r < per_rank.size(); ++r) {
    if (per_rank[r].compute_us > per_rank[slowest].compute_us) slowest = static_cast<int>(r);
  }
  return slowest;
}

double TpStats::SlowestOverFastest() const {
  if (per_rank.empty()) return 1;
  double least = per_rank[0].compute_us, most = least;
  for (const TpRankStats& r : per_rank) {
    least = std::min(least, r.compute_us);
    most = std::max(most, r.compute_us);
  }
  return least > 0 ? most / least : 1;
}

double TpStats::WaitShare() const {
  double wait = 0, comm = 0;
  for (const TpRankStats& r : per_rank) wait += r.wait_us, comm += r.comm_us;
  return comm > 0 ? wait / comm : 0;
}

double TpStats::CommShare() const {
  return !per_rank.empty() && per_rank[0].step_us > 0 ? per_rank[0].comm_us / per_rank[0].step_us
                                                      : 0;
}

TpStats CombineTpLogs(const std::vector<std::vector<TpStepEntry>>& logs, double begin_us,
                      double end_us) {
  TpStats s;
  s.ranks = static_cast<int>(logs.size());
  s.per_rank.resize(logs.size());
  if (logs.empty()) return s;
  std::vector<std::unordered_map<int64_t, const TpStepEntry*>> by_seq(logs.size());
  for (size_t r = 1; r < logs.size(); ++r) {
    for (const TpStepEntry& e : logs[r]) by_seq[r][e.seq] = &e;
  }
  std::vector<const TpStepEntry*> step(logs.size());
  for (const TpStepEntry& head : logs[0]) {
    if (head.start_us < begin_us || head.start_us > end_us) continue;
    step[0] = &head;
    bool everywhere = true;
    for (size_t r = 1; r < logs.size() && everywhere; ++r) {
      const auto it = by_seq[r].find(head.seq);
      everywhere = it != by_seq[r].end() && it->second->comm_us.size() == head.comm_us.size();
      if (everywhere) step[r] = it->second;
    }
    if (!everywhere) continue;
    ++s.steps;
    s.collectives += static_cast<int64_t>(head.comm_us.size());
    for (size_t i = 0; i < head.comm_us.size(); ++i) {
      double least = head.comm_us[i];
      for (size_t r = 1; r < logs.size(); ++r) least = std::min<double>(least, step[r]->comm_us[i]);
      s.transfer_us += least;
      for (size_t r = 0; r < logs.size(); ++r) s.per_rank[r].wait_us += step[r]->comm_us[i] - least;
    }
    for (size_t r = 0; r < logs.size(); ++r) {
      TpRankStats& k = s.per_rank[r];
      double comm = 0;
      for (float d : step[r]->comm_us) comm += d;
      k.step_us += step[r]->step_us;
      k.comm_us += comm;
      k.run_us += step[r]->run_us;
      k.sched_wait_us += step[r]->wait_us;
      k.compute_us += std::max(0.0, step[r]->step_us - comm);
    }
  }
  return s;
}

}  // namespace saturn
