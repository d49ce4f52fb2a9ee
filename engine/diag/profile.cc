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

Profile ComputeProfile(const std::vector<StepRecord>& steps, double window_begin_us,
                       double window_end_us, const Calibration& cal, const AnalyzerContext& ctx,
                       const AnalyzerThresholds& th) {
  Profile p;
  const double span_us = std::max(window_end_us - window_begin_us, 1e-9);
  p.window_s = span_us * 1e-6;
  p.steps = static_cast<int>(steps.size());
  p.ridge = cal.ridge_flops_per_byte();
  p.edge_busy_us = std::clamp(ctx.edge_busy_us, 0.0, span_us);
  if (steps.empty()) {
    p.idle_share = 1.0 - p.edge_busy_us / span_us;
    p.busy_fraction = p.edge_busy_us / span_us;
    return p;
  }
  double wall = 0, busy = 0, host = 0, launch = 0, flops = 0, bytes = 0;
  double prefill = 0, decode = 0, sampled = 0, seqs = 0, queue = 0, running = 0, kv = 0;
  double decode_steps = 0, decode_wall = 0, decode_seqs = 0, decode_ctx = 0;
  double uniform_decode = 0, replayed = 0, pad = 0, replay_rows = 0;
  for (size_t i = 0; i < steps.size(); ++i) {
    const StepRecord& r = steps[i];
    if (i > 0) {
      const double gap = r.start_us - steps[i - 1].end_us;
      // The engine only waits for requests when the next step admits one (a prefill); a gap
      // before a pure decode step is the loop itself (or the OS) keeping the host busy.
      if (gap > 0 && (r.num_prefill_tokens == 0 ||
                      gap <= std::max(th.idle_gap_floor_us, steps[i - 1].wall_us()))) {
        p.loop_gap_us += gap;
      }
    }
    wall += r.wall_us();
    busy += r.device_busy_us;
    host += r.schedule_us + r.prepare_us + r.postprocess_us;
    launch += LaunchUs(r, cal);
    flops += r.total_flops();
    bytes += r.total_bytes();
    prefill += r.num_prefill_tokens;
    decode += r.num_decode_tokens;
    sampled += r.num_sampled;
    seqs += r.num_seqs;
    queue += r.queue_depth;
    p.max_queue_depth = std::max(p.max_queue_depth, r.queue_depth);
    running += r.num_running;
    p.preemptions += r.num_preempted;
    const int blocks = r.kv_blocks_used + r.kv_blocks_free;
    const double use = blocks > 0 ? double(r.kv_blocks_used) / blocks : 0;
    kv += use;
    p.kv_usage_max = std::max(p.kv_usage_max, use);
    if (r.num_prefill_tokens == 0 && r.num_decode_tokens > 0) {
      ++decode_steps;
      decode_wall += r.wall_us();
      decode_seqs += r.num_seqs;
      decode_ctx += double(r.context_tokens);
      ++uniform_decode;
      if (r.graph_replayed) {
        ++replayed;
        pad += r.padding_tokens;
        replay_rows += r.num_decode_tokens + r.padding_tokens;
      }
    }
  }
  const double n = double(steps.size());
  const double span_s = p.window_s;
  p.steps_per_s = n / span_s;
  p.prefill_tokens_per_s = prefill / span_s;
  p.decode_tokens_per_s = decode / span_s;
  p.tokens_per_s = (prefill + decode) / span_s;
  p.output_tokens_per_s = sampled / span_s;
  p.mean_batch_seqs = seqs / n;
  p.mean_batch_tokens = (prefill + decode) / n;
  p.mean_step_ms = wall / n * 1e-3;
  p.mean_decode_step_ms = decode_steps > 0 ? decode_wall / decode_steps * 1e-3 : 0;
  p.mean_context = decode_seqs > 0 ? decode_ctx / decode_seqs : 0;
  // A step overlapping an edge (or running at the end) kept the engine busy for its overlap.
  p.busy_fraction = std::min(1.0, (busy + p.edge_busy_us) / span_us);
  p.idle_share = std::clamp((span_us - wall - p.loop_gap_us - p.edge_busy_us) / span_us, 0.0, 1.0);
  p.host_share = std::min(1.0, (host + p.loop_gap_us) / span_us);
  p.launch_share = std::min(1.0, launch / span_us);
  p.flops_per_s = flops / span_s;
  p.bytes_per_s = bytes / span_s;
  p.mfu = cal.gemm_flops_per_s > 0 ? p.flops_per_s / cal.gemm_flops_per_s : 0;
  p.mbu = cal.bandwidth_bytes_per_s > 0 ? p.bytes_per_s / cal.bandwidth_bytes_per_s : 0;
  p.intensity = bytes > 0 ? flops / bytes : 0;
  p.mean_queue_depth = queue / n;
  p.mean_running = running / n;
  p.kv_usage = kv / n;
  p.graph_hit_rate = uniform_decode > 0 ? replayed / uniform_decode : 0;
  p.padding_waste = replay_rows > 0 ? pad / replay_rows : 0;

  // Per-class roofline over the steps whose ops were timed.
  double total_class_us = 0;
  std::vector<ClassProfile> classes(kNumOpClasses);
  int timed = 0;
  for (const StepRecord& r : steps) {
    if (!r.per_op_timed) continue;
    ++timed;
    for (size_t c = 0; c < kNumOpClasses; ++c) {
      const OpClassStats& s = r.by_class[c];
      ClassProfile& cp = classes[c];
      cp.time_us += s.device_us;
      cp.flops += s.flops;
      cp.bytes += s.bytes;
      cp.ops_per_step = std::max(cp.ops_per_step, s.count);
      total_class_us += s.device_us;
    }
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
