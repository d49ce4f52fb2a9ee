// The additive summary of a run of consecutive step records: what a diagnostics window's
// profile and verdict need (sums, counts, maxima), without the records. The step ring folds
// the records it evicts into one StepSums per second of the steady clock, so a report can
// cover a window longer than the records it keeps (step_record.h). Plain data.
#pragma once

#include <array>
#include <cstdint>

#include "kernels/op_record.h"

namespace saturn {

struct StepRecord;

// A gap between two steps is idle (waiting for requests) only when the next step admits a
// request (has prefill tokens) and the gap is longer than max(this, the previous step's
// time); otherwise it is the engine loop's own overhead (HTA's "kernel wait").
inline constexpr double kIdleGapFloorUs = 1000;

// The loop-overhead part of the gap before `next`, after a step that ended at `prev_end_us`
// and took `prev_wall_us` (0 when `next` waited for requests).
double LoopGapUs(double prev_end_us, double prev_wall_us, const StepRecord& next,
                 double idle_gap_floor_us = kIdleGapFloorUs);

struct StepSums {
  struct Class {
    double flops = 0, bytes = 0;  // every step
    // Steps whose ops were timed only (the per-class roofline reads these).
    double timed_us = 0, timed_flops = 0, timed_bytes = 0;
    int max_count = 0;  // most ops of the class in one timed step
  };

  int64_t steps = 0;
  double first_start_us = 0;  // the first record's start, the last one's end and wall
  double last_end_us = 0;
  double last_wall_us = 0;

  double wall_us = 0;
  double device_busy_us = 0;
  double device_busy_in_wall_us = 0;  // sum of min(device busy, wall)
  double schedule_us = 0, prepare_us = 0, postprocess_us = 0;
  double hidden_host_us = 0;  // of schedule + postprocess, overlapped with the device
  double loop_gap_us = 0;     // between consecutive records added (LoopGapUs)
  double lead_gap_us = 0;     // of loop_gap_us, the gap before the first record (from one before)
  int64_t issued_ops = 0;     // ops launched one by one (op_count - replayed_ops)
  int64_t replay_steps = 0;   // steps with replayed ops (one graph launch each)
  bool any_graph_replayed = false;
  double sched_run_us = 0, sched_wait_us = 0;  // steps with sched_known only

  double prefill_tokens = 0, decode_tokens = 0, seqs = 0;
  double sampled = 0;  // tokens given to requests (StepRecord::output_tokens)
  double queue_depth = 0, running = 0, kv_usage = 0;  // summed per step (means / steps)
  int max_queue_depth = 0;
  double kv_usage_max = 0;
  int64_t preemptions = 0;
  // Prefix caching: tokens looked up and found cached, with caching on (taken) and off
  // (missed) apart.
  double prefix_query_tokens = 0, prefix_hit_tokens = 0;
  double prefix_missed_query_tokens = 0, prefix_missed_tokens = 0;
  // Speculation (StepRecord::spec_*, shadow_*).
  double spec_verify_seqs = 0, spec_draft_tokens = 0, spec_accepted_tokens = 0;
  double shadow_proposals = 0, shadow_drafted = 0, shadow_accepted = 0;

  // Pure decode steps (no prefill tokens), and those replayed from a graph.
  int64_t decode_steps = 0;
  double decode_wall_us = 0, decode_seqs = 0, decode_context = 0;
  double decode_sampled = 0;  // tokens given to requests by pure decode steps
  // Steps that carry decodes (pure or mixed): their wall time and the tokens they gave.
  double decoding_wall_us = 0, decoding_sampled = 0;
  int64_t replayed_decode_steps = 0;
  double padding_tokens = 0, replay_rows = 0;

  int64_t timed_steps = 0;
  double timed_wall_us = 0;
  std::array<Class, static_cast<size_t>(OpClass::kCount)> by_class{};

  // Adds `r`; `prev` (null: none) is the record before it, whose gap to `r` counts as
  // LoopGapUs (it need not have been added here: the ring's per-second sums count the gap
  // into the second of the step after it).
  void Add(const StepRecord& r, const StepRecord* prev, double idle_gap_floor_us = kIdleGapFloorUs);
  // Adds `later`, the sums of the records after this one's (gaps as they were counted).
  void Merge(const StepSums& later);
};

}  // namespace saturn
