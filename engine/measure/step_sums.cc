#include "engine/measure/step_sums.h"

#include <algorithm>

#include "engine/measure/step_record.h"

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

namespace {

// The sums of `r` alone, with its gap from `prev` (null: none): StepSums::Add merges them.
StepSums OneStep(const StepRecord& r, const StepRecord* prev, double idle_gap_floor_us) {
  StepSums s;
  s.steps = 1;
  s.first_start_us = r.start_us;
  s.last_end_us = r.end_us;
  s.last_wall_us = r.wall_us();
  if (prev != nullptr) {
    s.loop_gap_us = LoopGapUs(prev->end_us, prev->wall_us(), r, idle_gap_floor_us);
    s.lead_gap_us = s.loop_gap_us;
  }

  s.wall_us = r.wall_us();
  s.device_busy_us = r.device_busy_us;
  s.device_busy_in_wall_us = std::min(r.device_busy_us, r.wall_us());
  s.schedule_us = r.schedule_us;
  s.prepare_us = r.prepare_us;
  s.postprocess_us = r.postprocess_us;
  s.hidden_host_us = r.hidden_host_us;
  const int replayed = std::clamp(r.replayed_ops, 0, r.op_count);
  s.issued_ops = r.op_count - replayed;
  s.replay_steps = replayed > 0 ? 1 : 0;
  s.any_graph_replayed = r.graph_replayed;
  if (r.sched_known) {
    s.sched_run_us = std::max(0.0, r.sched_run_us);
    s.sched_wait_us = std::max(0.0, r.sched_wait_us);
  }

  s.prefill_tokens = r.num_prefill_tokens;
  s.decode_tokens = r.num_decode_tokens;
  s.sampled = r.output_tokens();
  s.seqs = r.num_seqs;
  s.queue_depth = r.queue_depth;
  s.max_queue_depth = r.queue_depth;
  s.running = r.num_running;
  s.preemptions = r.num_preempted;
  (r.options.prefix_caching ? s.prefix_query_tokens : s.prefix_missed_query_tokens) =
      r.prefix_query_tokens;
  (r.options.prefix_caching ? s.prefix_hit_tokens : s.prefix_missed_tokens) = r.prefix_hit_tokens;
  s.spec_verify_seqs = r.spec_verify_seqs;
  s.spec_draft_tokens = r.spec_draft_tokens;
  s.spec_accepted_tokens = r.spec_accepted_tokens;
  s.shadow_proposals = r.shadow_proposals;
  s.shadow_drafted = r.shadow_drafted;
  s.shadow_accepted = r.shadow_accepted;
  const int blocks = r.kv_blocks_used + r.kv_blocks_free;
  s.kv_usage = blocks > 0 ? double(r.kv_blocks_used) / blocks : 0;
  s.kv_usage_max = s.kv_usage;

  if (r.num_decode_tokens > 0) {
    s.decoding_wall_us = r.wall_us();
    s.decoding_sampled = r.output_tokens();
  }
  if (r.num_prefill_tokens == 0 && r.num_decode_tokens > 0) {
    s.decode_steps = 1;
    s.decode_wall_us = r.wall_us();
    s.decode_sampled = r.output_tokens();
    s.decode_seqs = r.num_seqs;
    s.decode_context = double(r.context_tokens);
    if (r.graph_replayed) {
      s.replayed_decode_steps = 1;
      s.padding_tokens = r.padding_tokens;
      s.replay_rows = r.num_decode_tokens + r.padding_tokens;
    }
  }

  if (r.per_op_timed) {
    s.timed_steps = 1;
    s.timed_wall_us = r.wall_us();
  }
  for (size_t c = 0; c < s.by_class.size(); ++c) {
    const OpClassStats& o = r.by_class[c];
    StepSums::Class& k = s.by_class[c];
    k.flops = o.flops;
    k.bytes = o.bytes;
    if (!r.per_op_timed) continue;
    k.timed_us = o.device_us;
    k.timed_flops = o.flops;
    k.timed_bytes = o.bytes;
    k.max_count = o.count;
  }
  return s;
}

}  // namespace

void StepSums::Add(const StepRecord& r, const StepRecord* prev, double idle_gap_floor_us) {
  Merge(OneStep(r, prev, idle_gap_floor_us));
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
  prefix_query_tokens += later.prefix_query_tokens;
  prefix_hit_tokens += later.prefix_hit_tokens;
  prefix_missed_query_tokens += later.prefix_missed_query_tokens;
  prefix_missed_tokens += later.prefix_missed_tokens;
  spec_verify_seqs += later.spec_verify_seqs;
  spec_draft_tokens += later.spec_draft_tokens;
  spec_accepted_tokens += later.spec_accepted_tokens;
  shadow_proposals += later.shadow_proposals;
  shadow_drafted += later.shadow_drafted;
  shadow_accepted += later.shadow_accepted;

  decode_steps += later.decode_steps;
  decode_wall_us += later.decode_wall_us;
  decode_seqs += later.decode_seqs;
  decode_context += later.decode_context;
  decode_sampled += later.decode_sampled;
  decoding_wall_us += later.decoding_wall_us;
  decoding_sampled += later.decoding_sampled;
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
