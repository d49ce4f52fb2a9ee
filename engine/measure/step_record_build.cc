#include "engine/measure/step_record_build.h"

#include <algorithm>
#include <utility>

namespace saturn {

void RecordStepWork(const StepPlan& plan, RunnerOutput* out, StepRecord* rec) {
  const StepTiming& t = out->timing;
  rec->prepare_us = out->prepare_us;
  rec->issue_us = t.issue_us;
  rec->device_busy_us = t.device_busy_us;
  rec->device_span_us = t.device_span_us;
  rec->per_op_timed = t.per_op_device_times;
  rec->op_count = static_cast<int>(t.ops.size());
  rec->replayed_ops = t.replayed_ops;
  rec->gap_us = std::max(0.0, rec->device_span_us - rec->device_busy_us);
  rec->num_seqs = static_cast<int>(plan.seqs.size());
  rec->num_prefill_tokens = plan.num_prefill_tokens;
  rec->num_decode_tokens = plan.num_decode_tokens;
  rec->num_sampled = static_cast<int>(out->sampled.size());
  rec->num_preempted = static_cast<int>(plan.preempted.size());
  for (const ScheduledSeq& s : plan.seqs) rec->context_tokens += s.context_len();
  rec->graph_replayed = out->graph_replayed;
  rec->graph_batch_size = out->graph_batch_size;
  rec->padding_tokens = out->padding_tokens;
  rec->prefix_query_tokens = plan.prefix_query_tokens;
  rec->prefix_hit_tokens = plan.prefix_hit_tokens;
  for (const ScheduledSeq& s : plan.seqs) rec->spec_verify_seqs += s.num_draft > 0 ? 1 : 0;
  rec->spec_draft_tokens = plan.num_draft_tokens;
  rec->shadow_proposals = plan.shadow_proposals;
  rec->shadow_drafted = plan.shadow_drafted;
  rec->shadow_accepted = plan.shadow_accepted;
  for (const OpRecord& op : t.ops) {
    OpClassStats& c = rec->by_class[static_cast<size_t>(ClassOf(op.kind))];
    ++c.count;
    c.flops += op.cost.flops;
    c.bytes += op.cost.bytes;
    if (op.device_begin_us >= 0) c.device_us += op.device_end_us - op.device_begin_us;
  }
  rec->ops = std::move(out->timing.ops);
}

void RecordServingState(const Scheduler& scheduler, StepRecord* rec) {
  rec->queue_depth = scheduler.num_waiting();
  rec->num_running = scheduler.num_running();
  rec->kv_blocks_free = scheduler.blocks().num_free();
  rec->kv_blocks_used = scheduler.blocks().num_used();
}

}  // namespace saturn
