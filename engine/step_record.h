// One record per engine step, written by the engine loop after the runner returns, kept in a
// bounded ring for the diagnostics (engine/diag/) to read. Plain data plus the ring.
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <mutex>
#include <vector>

#include "engine/engine_options.h"
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

  // Serving state after scheduling.
  int queue_depth = 0;  // waiting requests
  int num_running = 0;
  int kv_blocks_used = 0;
  int kv_blocks_free = 0;
  EngineOptions options;  // in force for this step (cuda_graphs: graph replay was on)

  std::array<OpClassStats, static_cast<size_t>(OpClass::kCount)> by_class{};
  double total_flops() const;
  double total_bytes() const;
  // Per-op records (kept for trace export).
  std::vector<OpRecord> ops;
};

// Bounded, thread-safe ring of the most recent step records. The engine thread pushes;
// readers copy out.
class StepRing {
 public:
  explicit StepRing(size_t capacity) : capacity_(capacity) {}
  void Push(StepRecord r);
  // The most recent `n` records (fewer if not available), oldest first.
  std::vector<StepRecord> Last(size_t n) const;
  // Records with start_us >= since_us, oldest first.
  std::vector<StepRecord> Since(double since_us) const;
  // The records from `before` records ahead of the first one with start_us >= since_us to the
  // newest, oldest first, without their per-op records (what a diagnostics window reads).
  std::vector<StepRecord> WindowFrom(double since_us, size_t before) const;
  int64_t total_steps() const;
  void Clear();
  size_t capacity() const { return capacity_; }

 private:
  size_t capacity_;
  mutable std::mutex mu_;
  std::deque<StepRecord> records_;
  int64_t total_ = 0;
};

}  // namespace saturn
