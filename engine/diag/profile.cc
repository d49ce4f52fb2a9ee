// The profile of a window of steps: rates, time shares of the window span, achieved FLOP/s
// and bytes/s against the calibrated ceilings, and the per-op-class roofline. Pure.
#include <algorithm>

#include "engine/diag/analyzer.h"

namespace saturn {

double LaunchUs(const StepRecord& step, const Calibration& cal) {
  const int replayed = std::clamp(step.replayed_ops, 0, step.op_count);
  const double graph = cal.graph_launch_us > 0 ? cal.graph_launch_us : cal.op_dispatch_us;
  return (step.op_count - replayed) * cal.op_dispatch_us + (replayed > 0 ? graph : 0.0);
}

double LaunchUs(const StepSums& sums, const Calibration& cal) {
  const double graph = cal.graph_launch_us > 0 ? cal.graph_launch_us : cal.op_dispatch_us;
  return double(sums.issued_ops) * cal.op_dispatch_us + double(sums.replay_steps) * graph;
}

StepSums SumWindow(const std::vector<StepRecord>& steps, const AnalyzerContext& ctx,
                   const AnalyzerThresholds& th) {
  StepSums s = ctx.earlier;
  for (size_t i = 0; i < steps.size(); ++i) {
    s.Add(steps[i], i > 0 ? &steps[i - 1] : nullptr, th.idle_gap_floor_us);
  }
  if (ctx.earlier.steps > 0 && !steps.empty()) {
    s.loop_gap_us += LoopGapUs(ctx.earlier.last_end_us, ctx.earlier.last_wall_us, steps.front(),
                               th.idle_gap_floor_us);
  }
  return s;
}

Profile ComputeProfile(const std::vector<StepRecord>& steps, double window_begin_us,
                       double window_end_us, const Calibration& cal, const AnalyzerContext& ctx,
                       const AnalyzerThresholds& th) {
  Profile p;
  const double span_us = std::max(window_end_us - window_begin_us, 1e-9);
  p.window_s = span_us * 1e-6;
  const StepSums s = SumWindow(steps, ctx, th);
  p.steps = static_cast<int>(s.steps);
  p.summed_steps = static_cast<int>(ctx.earlier.steps);
  p.ridge = cal.ridge_flops_per_byte();
  p.q8_0_gemm_flops_per_s = cal.q8_0_gemm_flops_per_s;
  p.q8_0_stream_bytes_per_s = cal.q8_0_stream_bytes_per_s;
  p.q8_0_stream8_bytes_per_s = cal.q8_0_stream8_bytes_per_s;
  p.edge_busy_us = std::clamp(ctx.edge_busy_us, 0.0, span_us);
  if (s.steps == 0) {
    p.idle_share = 1.0 - p.edge_busy_us / span_us;
    p.busy_fraction = p.edge_busy_us / span_us;
    return p;
  }
  double flops = 0, bytes = 0;
  for (size_t c = 0; c < kNumOpClasses; ++c) {
    if (OnTheRoofline(c)) flops += s.by_class[c].flops, bytes += s.by_class[c].bytes;
  }
  p.loop_gap_us = s.loop_gap_us;
  p.max_queue_depth = s.max_queue_depth;
  p.preemptions = static_cast<int>(s.preemptions);
  p.kv_usage_max = s.kv_usage_max;
  const double n = double(s.steps);
  const double span_s = p.window_s;
  p.steps_per_s = n / span_s;
  p.prefill_tokens_per_s = s.prefill_tokens / span_s;
  p.decode_tokens_per_s = s.decode_tokens / span_s;
  p.tokens_per_s = (s.prefill_tokens + s.decode_tokens) / span_s;
  p.output_tokens_per_s = s.sampled / span_s;
  p.decode_step_tokens_per_s = s.decode_wall_us > 0 ? s.decode_sampled / s.decode_wall_us * 1e6 : 0;
  p.decoding_step_tokens_per_s =
      s.decoding_wall_us > 0 ? s.decoding_sampled / s.decoding_wall_us * 1e6 : 0;
  p.mean_batch_seqs = s.seqs / n;
  p.mean_batch_tokens = (s.prefill_tokens + s.decode_tokens) / n;
  p.mean_step_ms = s.wall_us / n * 1e-3;
  p.mean_decode_step_ms = s.decode_steps > 0 ? s.decode_wall_us / double(s.decode_steps) * 1e-3 : 0;
  p.mean_context = s.decode_seqs > 0 ? s.decode_context / s.decode_seqs : 0;
  // A step overlapping an edge (or running at the end) kept the engine busy for its overlap.
  p.busy_fraction = std::min(1.0, (s.device_busy_us + p.edge_busy_us) / span_us);
  p.idle_share =
      std::clamp((span_us - s.wall_us - p.loop_gap_us - p.edge_busy_us) / span_us, 0.0, 1.0);
  const double host = s.schedule_us + s.prepare_us + s.postprocess_us - s.hidden_host_us;
  p.host_share = std::min(1.0, (host + p.loop_gap_us) / span_us);
  p.launch_share = std::min(1.0, LaunchUs(s, cal) / span_us);
  p.flops_per_s = flops / span_s;
  p.bytes_per_s = bytes / span_s;
  p.mfu = cal.gemm_flops_per_s > 0 ? p.flops_per_s / cal.gemm_flops_per_s : 0;
  p.mbu = cal.bandwidth_bytes_per_s > 0 ? p.bytes_per_s / cal.bandwidth_bytes_per_s : 0;
  p.intensity = bytes > 0 ? flops / bytes : 0;
  p.mean_queue_depth = s.queue_depth / n;
  p.mean_running = s.running / n;
  p.kv_usage = s.kv_usage / n;
  p.graph_hit_rate =
      s.decode_steps > 0 ? double(s.replayed_decode_steps) / double(s.decode_steps) : 0;
  p.padding_waste = s.replay_rows > 0 ? s.padding_tokens / s.replay_rows : 0;
  p.prefix_hit_rate = s.prefix_query_tokens > 0 ? s.prefix_hit_tokens / s.prefix_query_tokens : 0;
  p.prefix_saved_tokens_per_s = s.prefix_hit_tokens / span_s;
  p.prefix_missed_rate =
      s.prefix_missed_query_tokens > 0 ? s.prefix_missed_tokens / s.prefix_missed_query_tokens : 0;
  p.prefix_missed_tokens_per_s = s.prefix_missed_tokens / span_s;
  p.prefill_step_share =
      s.wall_us > 0 ? std::max(0.0, s.wall_us - s.decode_wall_us) / s.wall_us : 0;
  // Speculation: measured where it ran, else the proposals scored while it was off.
  p.speculating = s.spec_verify_seqs > 0;
  const double decodes = s.decode_tokens - s.spec_draft_tokens;  // one row per decoding seq
  const double proposals = p.speculating ? s.spec_verify_seqs : s.shadow_proposals;
  const double drafted = p.speculating ? s.spec_draft_tokens : s.shadow_drafted;
  const double accepted = p.speculating ? s.spec_accepted_tokens : s.shadow_accepted;
  p.spec_proposal_rate = decodes > 0 ? std::min(1.0, proposals / decodes) : 0;
  p.spec_mean_drafted = proposals > 0 ? drafted / proposals : 0;
  p.spec_acceptance_rate = drafted > 0 ? accepted / drafted : 0;
  p.spec_mean_accepted = proposals > 0 ? accepted / proposals : 0;
  p.spec_accepted_tokens_per_s = s.spec_accepted_tokens / span_s;

  // Per-class roofline over the steps whose ops were timed.
  double total_class_us = 0;
  std::vector<ClassProfile> classes(kNumOpClasses);
  const int64_t timed = s.timed_steps;
  for (size_t c = 0; c < kNumOpClasses; ++c) {
    const StepSums::Class& k = s.by_class[c];
    ClassProfile& cp = classes[c];
    cp.time_us = k.timed_us;
    cp.flops = k.timed_flops;
    cp.bytes = k.timed_bytes;
    cp.ops_per_step = k.max_count;
    total_class_us += k.timed_us;
  }
  for (size_t c = 0; c < kNumOpClasses; ++c) {
    ClassProfile& cp = classes[c];
    cp.op_class = static_cast<OpClass>(c);
    if (timed == 0 || cp.ops_per_step == 0) continue;
    cp.time_share = total_class_us > 0 ? cp.time_us / total_class_us : 0;
    cp.intensity = cp.bytes > 0 ? cp.flops / cp.bytes : 0;
    const double t_s = cp.time_us * 1e-6;
    cp.flops_per_s = t_s > 0 ? cp.flops / t_s : 0;
    cp.bytes_per_s = t_s > 0 ? cp.bytes / t_s : 0;
    cp.mfu = cal.gemm_flops_per_s > 0 ? cp.flops_per_s / cal.gemm_flops_per_s : 0;
    cp.mbu = cal.bandwidth_bytes_per_s > 0 ? cp.bytes_per_s / cal.bandwidth_bytes_per_s : 0;
    const double floor_s =
        std::max(cal.gemm_flops_per_s > 0 ? cp.flops / cal.gemm_flops_per_s : 0,
                 cal.bandwidth_bytes_per_s > 0 ? cp.bytes / cal.bandwidth_bytes_per_s : 0);
    cp.roofline_efficiency = t_s > 0 ? floor_s / t_s : 0;
    cp.compute_side = p.ridge > 0 && cp.intensity > p.ridge;
    p.classes.push_back(cp);
  }
  return p;
}

}  // namespace saturn
