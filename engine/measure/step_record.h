// One record per engine step, written by the engine loop after the runner returns, kept in a
// bounded ring for the diagnostics (engine/diag/) to read. Plain data plus the ring.
//
// A record spans one turn of the loop, so records tile the engine's time. With the plain loop
// a turn schedules, runs and completes one step. With the overlapped loop
// (EngineConfig::async_scheduling) a turn schedules step N+1, waits for step N, launches N+1
// and completes N: the record is N's (its work, ops, prepare, issue and device times), its
// schedule_us is N+1's scheduling, done in the same turn, and hidden_host_us says how much of
// schedule + postprocess ran while the device had work queued.
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "engine/engine_options.h"
#include "engine/measure/step_sums.h"
#include "kernels/op_record.h"

namespace saturn {

struct OpClassStats {
  int count = 0;
  double device_us = 0;  // sum of timed device intervals (0 when not timed this step)
  double flops = 0;
  double bytes = 0;
};

struct StepRecord {
  int64_t step_id = 0;
  // Steady-clock microseconds.
  double start_us = 0;
  double end_us = 0;
  double wall_us() const { return end_us - start_us; }

  // Host phases.
  double schedule_us = 0;     // inside Scheduler::Schedule
  double prepare_us = 0;      // building and uploading inputs
  double issue_us = 0;        // inside op issue calls (launches on CUDA)
  double postprocess_us = 0;  // Scheduler::Update and token events
  // Of schedule + postprocess, the part the device did not wait for: with the overlapped loop
  // (EngineConfig::async_scheduling) on an asynchronous backend they run while the next step is
  // queued on the device; counted up to a step's device busy time. 0 otherwise.
  double hidden_host_us = 0;
  // Device.
  double device_busy_us = 0;  // union of op device intervals (or the step span when per-op
                              // timing was off)
  double device_span_us = 0;
  bool per_op_timed = false;
  int op_count = 0;
  int replayed_ops = 0;  // of op_count, those a graph replay issued (one launch for them all)
  double gap_us = 0;     // device idle between ops inside the span (span - busy)
  // CPU contention: the threads that run the step (engine thread and the backend's workers),
  // summed, from the kernel's schedstat: time on a core and time runnable but waiting for
  // one, during the step. sched_known false where Linux does not expose them.
  double sched_run_us = 0;
  double sched_wait_us = 0;
  bool sched_known = false;

  // Work.
  int num_seqs = 0;
  int num_prefill_tokens = 0;
  int num_decode_tokens = 0;
  int num_sampled = 0;
  int num_preempted = 0;
  int64_t context_tokens = 0;  // sum of context lengths attended
  bool graph_replayed = false;
  int graph_batch_size = 0;
  int padding_tokens = 0;
  // Prefix caching (Scheduler): the known tokens of the requests admitted this step, and those
  // found in cached blocks (not computed when options.prefix_caching; the reuse missed when
  // not).
  int prefix_query_tokens = 0;
  int prefix_hit_tokens = 0;
  // Speculative decoding (Scheduler): the sequences that verified proposals this step, the
  // tokens proposed and those kept. Off (options.num_speculative_tokens 0), the proposals the
  // scheduler scored against the tokens that followed (completed since the step before): how
  // many, their tokens, and those that matched in a row.
  int spec_verify_seqs = 0, spec_draft_tokens = 0, spec_accepted_tokens = 0;
  int shadow_proposals = 0, shadow_drafted = 0, shadow_accepted = 0;

  // Serving state after scheduling.
  int queue_depth = 0;  // waiting requests
  int num_running = 0;
  int kv_blocks_used = 0;
  int kv_blocks_free = 0;
  EngineOptions options;  // in force for this step (cuda_graphs: graph replay was on)

  std::array<OpClassStats, static_cast<size_t>(OpClass::kCount)> by_class{};
  // Tokens the step gave requests: a row per sampling sequence, more where proposals were kept.
  int output_tokens() const { return num_sampled - spec_draft_tokens + spec_accepted_tokens; }
  double total_flops() const;
  double total_bytes() const;
  // Per-op records (kept for trace export).
  std::vector<OpRecord> ops;
};

// The sums of the records a ring evicted, for a window that reaches back past its records.
struct EvictedSums {
  StepSums sums;          // records evicted that started at or after begin_us (steps 0: none)
  double begin_us = 0;    // where the sums begin: a whole second of the steady clock
  bool complete = false;  // the sums hold every evicted record from begin_us on
};

// Bounded, thread-safe ring of the most recent step records. The engine thread pushes;
// readers copy out. Three tiers: the newest `ops_capacity` records keep their per-op records
// (traces read those); older ones keep the rest (what diagnostics windows read), up to
// `capacity` records in all, so a long window costs about 0.4 kB a step (kBytesPerRecord), not
// the ops' 64 bytes each; records evicted past that are folded into per-second sums
// (StepSums), kept for `kSumSeconds` seconds whatever the step rate, so a report's profile and
// verdict can cover a window longer than the records. Records live in sealed chunks shared
// with readers, so a reader copies a window without holding the engine's Push for it.
class StepRing {
 public:
  // Seconds of per-second sums kept: the newest kSumSeconds seconds that held a step (idle
  // seconds cost nothing), at least the longest diagnostics window (an hour) and a margin;
  // about 0.5 kB each, 2 MB in all. Their loop gaps use kIdleGapFloorUs (the analyzer's
  // default threshold).
  static constexpr size_t kSumSeconds = 3660;
  static constexpr double kSumIntervalUs = 1e6;

  // Approximate memory one record costs in the history tier (sizeof(StepRecord) and the
  // chunk's share of its bookkeeping), for sizing `capacity` from a byte budget.
  static constexpr size_t kBytesPerRecord = sizeof(StepRecord) + 8;

  explicit StepRing(size_t capacity, size_t ops_capacity = 0);
  void Push(StepRecord r);
  // The most recent `n` records (fewer if not available), oldest first, with their per-op
  // records where the ops tier still holds them.
  std::vector<StepRecord> Last(size_t n) const;
  // Records with start_us >= since_us, oldest first, per-op records as Last.
  std::vector<StepRecord> Since(double since_us) const;
  // The records from `before` records ahead of the first one with start_us >= since_us to the
  // newest, oldest first, without their per-op records (what a diagnostics window reads).
  std::vector<StepRecord> WindowFrom(double since_us, size_t before) const;
  // The window [since_us, until_us]: as WindowFrom(since_us, before) and, in the same instant,
  // the sums of the evicted records from the first whole second at or after since_us (so the
  // two never hold the same step); the records then start after the sums. `earlier` is left
  // empty where the records reach back to since_us, where no evicted step starts in the window,
  // and where an evicted step ends after until_us (a window wholly in the past: the sums cannot
  // be cut at its end).
  std::vector<StepRecord> WindowWithEvicted(double since_us, double until_us, size_t before,
                                            EvictedSums* earlier) const;
  int64_t total_steps() const;
  void Clear();
  size_t capacity() const { return capacity_; }
  size_t ops_capacity() const { return ops_capacity_; }
  size_t size() const;

 private:
  using Chunk = std::vector<StepRecord>;
  // The records at one moment: shared sealed chunks (the first from `head`) and a copy of the
  // open one. Taken under the lock (pointers and at most chunk_ records), read without it.
  struct View {
    std::vector<std::shared_ptr<const Chunk>> sealed;
    size_t head = 0;
    Chunk open;
    size_t size() const;
    // Records [from, size()) in order.
    std::vector<StepRecord> CopyFrom(size_t from) const;
    const StepRecord& at(size_t i) const;
    size_t FirstFrom(double since_us) const;  // index of the first record starting at or after
  };
  View Snapshot() const;
  View SnapshotLocked() const;  // the same, with mu_ held by the caller
  // Attaches the ops tier's per-op records to `out` (ordered by step_id).
  void AttachOps(std::vector<StepRecord>* out) const;

  const size_t capacity_;
  const size_t ops_capacity_;
  const size_t chunk_;  // records per sealed chunk (512, or capacity_ when smaller)
  mutable std::mutex mu_;
  std::deque<std::shared_ptr<const Chunk>> sealed_;  // full chunks, oldest first
  size_t head_ = 0;  // records of sealed_.front() already dropped (they are older than capacity_)
  Chunk open_;       // the chunk being filled
  size_t size_ = 0;  // records held: sealed_ from head_, and open_
  // Folds the oldest record (about to be dropped) into its second's sums. Under mu_.
  void Evict(const StepRecord& r);

  // Per-second sums of the evicted records (label: the second's start, steady-clock us),
  // oldest first; the newest kSumSeconds seconds that held a step.
  std::deque<std::pair<double, StepSums>> evicted_;
  double evicted_dropped_through_ = -1;  // newest second's label dropped from evicted_ (-1: none)
  StepRecord last_evicted_;
  bool any_evicted_ = false;
  // Per-op records of the newest ops_capacity_ steps, oldest first.
  std::deque<std::pair<int64_t, std::vector<OpRecord>>> ops_;
  int64_t total_ = 0;
};

}  // namespace saturn
