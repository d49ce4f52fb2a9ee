#include "engine/step_sums.h"

#include <algorithm>

#include "engine/step_record.h"

namespace saturn {

double LoopGapUs(double prev_end_us, double prev_wall_us, const StepRecord& next,
                 double idle_gap_floor_us) {
  const double gap = next.start_us - prev_end_us;
  // The engine only waits for requests when the next step admits one (a prefill); a gap
  // before a pure decode step is the loop itself (or the OS) keeping the host busy.
  if (gap > 0 &&
      (next.num_prefill_tokens == 0 || gap <= std::max(idle_gap_floor_us, prev_wall_us))) {
    return gap;
  }
  return 0;
}

void StepSums::Add(const StepRecord& r, const StepRecord* prev, double idle_gap_floor_us) {
  if (steps == 0) first_start_us = r.start_us;
  ++steps;
  last_end_us = r.end_us;
  last_wall_us = r.wall_us();
  if (prev != nullptr) {
    const double gap = LoopGapUs(prev->end_us, prev->wall_us(), r, idle_gap_floor_us);
    loop_gap_us += gap;
    if (steps == 1) lead_gap_us = gap;
  }

  wall_us += r.wall_us();
  device_busy_us += r.device_busy_us;
  device_busy_in_wall_us += std::min(r.device_busy_us, r.wall_us());
  schedule_us += r.schedule_us;
  prepare_us += r.prepare_us;
  postprocess_us += r.postprocess_us;
  hidden_host_us += r.hidden_host_us;
  const int replayed = std::clamp(r.replayed_ops, 0, r.op_count);
  issued_ops += r.op_count - replayed;
  if (replayed > 0) ++replay_steps;
  any_graph_replayed = any_graph_replayed || r.graph_replayed;
  if (r.sched_known) {
    sched_run_us += std::max(0.0, r.sched_run_us);
    sched_wait_us += std::max(0.0, r.sched_wait_us);
  }

  prefill_tokens += r.num_prefill_tokens;
  decode_tokens += r.num_decode_tokens;
  sampled += r.num_sampled;
  seqs += r.num_seqs;
  queue_depth += r.queue_depth;
  max_queue_depth = std::max(max_queue_depth, r.queue_depth);
  running += r.num_running;
  preemptions += r.num_preempted;
  const int blocks = r.kv_blocks_used + r.kv_blocks_free;
  const double use = blocks > 0 ? double(r.kv_blocks_used) / blocks : 0;
  kv_usage += use;
  kv_usage_max = std::max(kv_usage_max, use);

  if (r.num_prefill_tokens == 0 && r.num_decode_tokens > 0) {
    ++decode_steps;
    decode_wall_us += r.wall_us();
    decode_seqs += r.num_seqs;
    decode_context += double(r.context_tokens);
    if (r.graph_replayed) {
      ++replayed_decode_steps;
      padding_tokens += r.padding_tokens;
      replay_rows += r.num_decode_tokens + r.padding_tokens;
    }
  }

  if (r.per_op_timed) {
    ++timed_steps;
    timed_wall_us += r.wall_us();
  }
  for (size_t c = 0; c < by_class.size(); ++c) {
    const OpClassStats& s = r.by_class[c];
    Class& k = by_class[c];
    k.flops += s.flops;
    k.bytes += s.bytes;
    if (!r.per_op_timed) continue;
    k.timed_us += s.device_us;
    k.timed_flops += s.flops;
    k.timed_bytes += s.bytes;
    k.max_count = std::max(k.max_count, s.count);
  }
}

void StepSums::Merge(const StepSums& later) {
  if (later.steps == 0) return;
  if (steps == 0) {
    first_start_us = later.first_start_us;
    lead_gap_us = later.lead_gap_us;
  }
  steps += later.steps;
  last_end_us = later.last_end_us;
  last_wall_us = later.last_wall_us;

  wall_us += later.wall_us;
  device_busy_us += later.device_busy_us;
  device_busy_in_wall_us += later.device_busy_in_wall_us;
  schedule_us += later.schedule_us;
  prepare_us += later.prepare_us;
  postprocess_us += later.postprocess_us;
  hidden_host_us += later.hidden_host_us;
  loop_gap_us += later.loop_gap_us;
  issued_ops += later.issued_ops;
  replay_steps += later.replay_steps;
  any_graph_replayed = any_graph_replayed || later.any_graph_replayed;
  sched_run_us += later.sched_run_us;
  sched_wait_us += later.sched_wait_us;

  prefill_tokens += later.prefill_tokens;
  decode_tokens += later.decode_tokens;
  sampled += later.sampled;
  seqs += later.seqs;
  queue_depth += later.queue_depth;
  running += later.running;
  kv_usage += later.kv_usage;
  max_queue_depth = std::max(max_queue_depth, later.max_queue_depth);
  kv_usage_max = std::max(kv_usage_max, later.kv_usage_max);
  preemptions += later.preemptions;

  decode_steps += later.decode_steps;
  decode_wall_us += later.decode_wall_us;
  decode_seqs += later.decode_seqs;
  decode_context += later.decode_context;
  replayed_decode_steps += later.replayed_decode_steps;
  padding_tokens += later.padding_tokens;
  replay_rows += later.replay_rows;

  timed_steps += later.timed_steps;
  timed_wall_us += later.timed_wall_us;
  for (size_t c = 0; c < by_class.size(); ++c) {
    Class& k = by_class[c];
    const Class& o = later.by_class[c];
    k.flops += o.flops;
    k.bytes += o.bytes;
    k.timed_us += o.timed_us;
    k.timed_flops += o.timed_flops;
    k.timed_bytes += o.timed_bytes;
    k.max_count = std::max(k.max_count, o.max_count);
  }
}

}  // namespace saturn
