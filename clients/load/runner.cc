// The dispatcher loop (see runner.h).
//
// Ownership: each StreamCall is held by a shared_ptr in Phase::live_ until its done callback,
// which hands the record to the phase and moves the call to Phase::ended_ (the phase's lock
// is never held while calling into the transport, so a callback that runs inline cannot
// deadlock). Calls are destroyed on the dispatcher's thread, never inside their callback
// (grpc_transport.cc says why for gRPC; an HTTP call joins its thread). The phase waits until
// nothing is live before it returns, so calls never outlive it.
#include "clients/load/runner.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "clients/load/arrivals.h"

namespace saturn::clients {
namespace {

using Clock = LoadClock;

double Since(Clock::time_point t0, Clock::time_point t) {
  return std::chrono::duration<double>(t - t0).count();
}

class Phase {
 public:
  Phase(const Transport& transport, const Workload& workload, const PhaseSettings& s)
      : transport_(transport), workload_(workload), s_(s) {}

  PhaseOutcome Run(const ProgressFn& progress, const std::atomic<bool>* interrupt);
  void Finished(StreamCall* call, RequestRecord rec);

 private:
  CallRequest MakeRequest(int64_t i) const;
  Progress Snapshot(Clock::time_point now) const;  // needs mu_
  void CancelAll();
  void ReapEnded();  // destroys the calls whose OnDone has run, on the calling thread

  const Transport& transport_;
  const Workload& workload_;
  const PhaseSettings s_;
  Clock::time_point t0_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::unordered_map<StreamCall*, std::shared_ptr<StreamCall>> live_;
  std::vector<std::shared_ptr<StreamCall>> ended_;  // OnDone ran; not yet destroyed
  std::vector<RequestRecord> done_;
  int64_t sent_ = 0, completed_ = 0, errors_ = 0;
  Clock::time_point warmup_end_ = Clock::time_point::max();  // max: warm-up not over
  std::string stop_reason_;
};

CallRequest Phase::MakeRequest(int64_t i) const {
  CallRequest r;
  r.index = i;
  r.item = workload_.Get(s_.first_item + i);
  r.temperature = s_.temperature;
  r.seed = static_cast<int64_t>(s_.seed + static_cast<uint64_t>(i));
  r.ignore_eos = s_.ignore_eos;
  r.client_request_id = absl::StrCat("saturn-load/", s_.label, "/", i);
  r.timeout_s = s_.request_timeout_s;
  return r;
}

void Phase::Finished(StreamCall* call, RequestRecord rec) {
  std::lock_guard<std::mutex> lock(mu_);
  if (rec.ok()) {
    ++completed_;
    if (completed_ == s_.warmup_requests) warmup_end_ = Clock::now();
  } else {
    ++errors_;
    if (stop_reason_.empty() && IsPermanentRejection(rec.status)) {
      stop_reason_ = absl::StrCat("the server rejected request ", rec.index, ": ", rec.status, ": ",
                                  rec.error_message);
    } else if (stop_reason_.empty() && s_.max_errors > 0 && errors_ >= s_.max_errors) {
      stop_reason_ = absl::StrCat(errors_, " requests failed (--max_errors=", s_.max_errors,
                                  "); last: ", rec.status, ": ", rec.error_message);
    }
  }
  done_.push_back(std::move(rec));
  auto it = live_.find(call);
  if (it != live_.end()) {
    ended_.push_back(std::move(it->second));  // destroyed by the dispatcher (ReapEnded)
    live_.erase(it);
  }
  cv_.notify_all();
}

void Phase::ReapEnded() {
  std::vector<std::shared_ptr<StreamCall>> ended;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ended.swap(ended_);
  }
  // Destroyed here, outside the lock: each call's OnDone has already run.
}

Progress Phase::Snapshot(Clock::time_point now) const {
  Progress p;
  p.sent = sent_;
  p.completed = completed_;
  p.errors = errors_;
  p.in_flight = static_cast<int64_t>(live_.size());
  p.elapsed_s = Since(t0_, now);
  return p;
}

void Phase::CancelAll() {
  std::vector<std::shared_ptr<StreamCall>> calls;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [ptr, call] : live_) calls.push_back(call);
  }
  for (auto& c : calls) c->Cancel();
}

PhaseOutcome Phase::Run(const ProgressFn& progress, const std::atomic<bool>* interrupt) {
  PhaseOutcome out;
  out.start_unix_s =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  t0_ = Clock::now();
  const Clock::time_point end_of_sending =
      s_.duration_s > 0 ? t0_ + std::chrono::microseconds(static_cast<int64_t>(s_.duration_s * 1e6))
                        : Clock::time_point::max();
  PoissonSchedule arrivals(s_.open_loop ? s_.request_rate : 1.0, s_.seed);
  auto next_send = t0_;
  if (s_.open_loop) {
    next_send = t0_ + std::chrono::duration_cast<Clock::duration>(
                          std::chrono::duration<double>(arrivals.Next()));
  }
  if (s_.warmup_requests <= 0) warmup_end_ = t0_;
  const bool extend = s_.min_measure_s > 0 && !(s_.open_loop && std::isinf(s_.request_rate));
  const auto min_measure =
      std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s_.min_measure_s));
  Clock::time_point bound_at = Clock::time_point::max();  // when a bound was first reached
  int64_t sent_at_bound = 0;
  Clock::time_point next_progress = t0_;
  const auto tick = std::chrono::milliseconds(100);
  auto report = [&](bool sending_done) {
    if (!progress) return;
    Progress p;
    {
      std::lock_guard<std::mutex> lock(mu_);
      p = Snapshot(Clock::now());
    }
    p.sending_done = sending_done;
    progress(p);
  };

  // Sending.
  while (true) {
    const auto now = Clock::now();
    if (now >= next_progress) {
      report(false);
      ReapEnded();
      next_progress = now + tick;
    }
    if (interrupt != nullptr && interrupt->load()) {
      out.interrupted = true;
      break;
    }
    std::unique_lock<std::mutex> lock(mu_);
    if (!stop_reason_.empty()) break;
    if ((s_.num_requests > 0 && sent_ >= s_.num_requests) || now >= end_of_sending) {
      if (!extend) break;
      if (bound_at == Clock::time_point::max()) {
        bound_at = now;
        sent_at_bound = sent_;
      }
      const bool warm = warmup_end_ != Clock::time_point::max();
      if (warm && now - warmup_end_ >= min_measure) {
        if (sent_ > sent_at_bound) {
          out.measure_note = absl::StrFormat(
              "sent %d requests past the bound so that the load ran %.1f s after warm-up "
              "(--min_measure_s)",
              sent_ - sent_at_bound, Since(warmup_end_, now));
        }
        break;
      }
      if (now - bound_at >= 3 * min_measure) {
        out.measure_note = absl::StrFormat(
            "gave up extending after %.1f s past the bound: %s (--min_measure_s=%.1f)",
            Since(bound_at, now),
            warm ? absl::StrFormat("only %.1f s of load after warm-up", Since(warmup_end_, now))
                 : std::string("the warm-up never ended"),
            s_.min_measure_s);
        break;
      }
    }
    // Past the duration bound (extending), wait on completions and ticks only.
    const auto wake =
        std::min({now < end_of_sending ? end_of_sending : now + tick, now + tick, next_progress});
    if (!s_.open_loop && static_cast<int>(live_.size()) >= s_.concurrency) {
      cv_.wait_until(lock, wake);
      continue;
    }
    if (s_.open_loop && now < next_send) {
      lock.unlock();
      std::this_thread::sleep_until(std::min(wake, next_send));
      continue;
    }
    const int64_t i = sent_++;
    std::shared_ptr<StreamCall> call = transport_.NewCall(
        MakeRequest(i), t0_,
        [this](StreamCall* c, RequestRecord rec) { Finished(c, std::move(rec)); });
    live_.emplace(call.get(), call);
    lock.unlock();
    call->Start();  // the map keeps it alive
    if (s_.open_loop) {
      next_send = t0_ + std::chrono::duration_cast<Clock::duration>(
                            std::chrono::duration<double>(arrivals.Next()));
    }
  }

  // Draining: every request sent must end (or be cancelled on interrupt).
  bool cancelled = false;
  while (true) {
    if (!cancelled && (out.interrupted || (interrupt != nullptr && interrupt->load()))) {
      out.interrupted = true;
      CancelAll();
      cancelled = true;
    }
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (live_.empty()) break;
      cv_.wait_for(lock, tick);
    }
    report(true);
  }
  ReapEnded();  // every call has ended: none outlives the phase
  report(true);

  std::lock_guard<std::mutex> lock(mu_);
  out.elapsed_s = Since(t0_, Clock::now());
  out.stop_reason = out.interrupted ? "interrupted" : stop_reason_;
  out.records = std::move(done_);
  std::sort(out.records.begin(), out.records.end(),
            [](const RequestRecord& a, const RequestRecord& b) { return a.index < b.index; });
  return out;
}

}  // namespace

bool IsPermanentRejection(const std::string& status) {
  return status == "INVALID_ARGUMENT" || status == "FAILED_PRECONDITION" ||
         status == "UNIMPLEMENTED" || status == "PERMISSION_DENIED" ||
         status == "UNAUTHENTICATED" || status == "NOT_FOUND" || status == "OUT_OF_RANGE" ||
         status == "HTTP_400" || status == "HTTP_401" || status == "HTTP_403" ||
         status == "HTTP_404" || status == "HTTP_422";
}

PhaseOutcome RunPhase(const Transport& transport, const Workload& workload,
                      const PhaseSettings& settings, const ProgressFn& progress,
                      const std::atomic<bool>* interrupt) {
  Phase phase(transport, workload, settings);
  return phase.Run(progress, interrupt);
}

}  // namespace saturn::clients
