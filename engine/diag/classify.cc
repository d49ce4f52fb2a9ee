// The bottleneck class and the signals that decided it (docs/DIAGNOSTICS.md, "Verdict").
//
//   engine idle share > 0.30                              -> UNDERLOADED (device waits for work)
//   per-step overhead (op count x calibrated dispatch + host phases) > the step's roofline
//     floor, and one TRT-LLM host signal crossed        -> LAUNCH_BOUND
//   queue empty and batch < 0.5 x max_num_seqs, steps not compute-bound -> UNDERLOADED
//   roofline: FLOPs/peak vs bytes/bandwidth summed per class -> COMPUTE_ or MEMORY_BOUND
#include <algorithm>
#include <array>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/diag/analyzer.h"
#include "kernels/enum_table.h"

namespace saturn {
namespace {

constexpr char kTrtllm[] = "TensorRT-LLM perf-host-analysis";
constexpr char kCalibrated[] = "derived: calibrated op dispatch cost vs roofline floor";

Signal Above(std::string name, double value, double threshold, std::string source,
             std::string meaning) {
  return Signal{std::move(name),   value, threshold, value > threshold, std::move(source),
                std::move(meaning)};
}

Signal Below(std::string name, double value, double threshold, std::string source,
             std::string meaning) {
  return Signal{std::move(name),   value, threshold, value < threshold, std::move(source),
                std::move(meaning)};
}

// Step-time MFU/MBU and the op classes holding the step furthest below their roof.
void NameHeadroom(const StepSums& s, const Profile& p, const Calibration& cal,
                  const AnalyzerThresholds& th, Verdict* v) {
  double flops = 0, bytes = 0;
  for (const StepSums::Class& c : s.by_class) flops += c.flops, bytes += c.bytes;
  const double wall = s.wall_us, timed_wall = s.timed_wall_us;
  if (wall <= 0) return;
  v->step_mfu = cal.gemm_flops_per_s > 0 ? flops / (wall * 1e-6) / cal.gemm_flops_per_s : 0;
  v->step_mbu =
      cal.bandwidth_bytes_per_s > 0 ? bytes / (wall * 1e-6) / cal.bandwidth_bytes_per_s : 0;
  v->far_below_roofs = v->step_mfu < th.far_below_roofs && v->step_mbu < th.far_below_roofs;
  if (timed_wall <= 0) return;
  for (const ClassProfile& c : p.classes) {
    Headroom h;
    h.op_class = c.op_class;
    h.step_share = c.time_us / timed_wall;
    h.roofline_efficiency = c.roofline_efficiency;
    h.step_saved_share = h.step_share * std::max(0.0, 1.0 - c.roofline_efficiency);
    h.speedup = 1.0 / std::max(1e-9, 1.0 - h.step_saved_share);
    if (h.step_saved_share >= 0.05) v->headroom.push_back(h);
  }
  std::sort(v->headroom.begin(), v->headroom.end(), [](const Headroom& a, const Headroom& b) {
    return a.step_saved_share > b.step_saved_share;
  });
  if (v->headroom.size() > 3) v->headroom.resize(3);
}

// Of the time the threads running the steps were runnable, the share they had a core
// (StepRecord sched_*); -1 when no step measured it.
double StepRunShare(const StepSums& s) {
  const double run = s.sched_run_us, wait = s.sched_wait_us;
  return run + wait > 0 ? run / (run + wait) : -1;
}

}  // namespace

const char* BottleneckName(Bottleneck b) {
  static constexpr std::array kNames{"UNKNOWN",      "UNDERLOADED",   "LAUNCH_BOUND",
                                     "MEMORY_BOUND", "COMPUTE_BOUND", "HOST_BOUND"};
  return EnumLookup(kNames, b, "UNKNOWN");
}

std::string HostPathChange(const Verdict& v, bool event_thread) {
  const Verdict::HostPhases& h = v.host_per_step;
  const double largest = std::max({h.schedule_us, h.prepare_us, h.postprocess_us, h.loop_gap_us});
  if (largest <= 0)
    return "host work overlapped with the device, or less of it per token, would "
           "recover it";
  if (largest == h.postprocess_us && !event_thread) {
    return absl::StrFormat(
        "the largest phase is postprocess (%.0f us): the token events (tokenizing, building and "
        "writing each stream's message) run on the engine thread; saturn-server "
        "--event_thread=on moves them to their own thread while the next step runs (auto does "
        "so on CUDA and where the CPU backend leaves a core free)",
        h.postprocess_us);
  }
  if (largest == h.postprocess_us) {
    return absl::StrFormat(
        "the largest phase is postprocess (%.0f us): the scheduler update, and the engine "
        "waiting for the event thread when the streams' writes fall 4 steps behind; fewer "
        "streams per replica or less work per event would recover it",
        h.postprocess_us);
  }
  if (largest == h.loop_gap_us) {
    return absl::StrFormat(
        "the largest phase is the gap between steps (%.0f us): the engine thread waits to be "
        "woken or for a core (see cpu_run_share); fewer other processes on the host's cores "
        "would recover it",
        h.loop_gap_us);
  }
  if (h.overlapped && largest == h.schedule_us) {
    return absl::StrFormat(
        "the largest phase is schedule (%.0f us a step left after the overlapped loop hid what "
        "the device's step covers): the host's schedule and postprocess outlast the device's "
        "step; fewer running requests per replica would recover it",
        largest);
  }
  if (largest == h.prepare_us) {
    return absl::StrFormat(
        "the largest phase is prepare (%.0f us a step, growing with the running requests): "
        "building and uploading the step's inputs runs between the device's steps even with "
        "the overlapped loop (the inputs wait for the previous step's tokens); fewer running "
        "requests per replica would recover it",
        largest);
  }
  if (!h.device_async) {
    return absl::StrFormat(
        "the largest phase is schedule (%.0f us a step, growing with the running requests): "
        "the backend runs its ops on the host as they are issued, so there is no device step "
        "to hide it behind; fewer running requests per replica would recover it",
        largest);
  }
  return absl::StrFormat(
      "the largest phase is schedule (%.0f us a step, growing with the running requests): "
      "saturn-server --async_scheduling=on overlaps it with the device's step (as vLLM v1's "
      "async scheduling and SGLang's overlap scheduler do)",
      largest);
}

Verdict Classify(const std::vector<StepRecord>& steps, const Profile& p, const Calibration& cal,
                 const AnalyzerContext& ctx, const AnalyzerThresholds& th) {
  Verdict v;
  // The steps' own threads over the window where measured, else the server's since the
  // previous report.
  const StepSums sums = SumWindow(steps, ctx, th);
  const double step_share = StepRunShare(sums);
  v.run_share = std::clamp(step_share >= 0 ? step_share : ctx.run_share, 0.05, 1.0);
  v.signals.push_back(Above("engine_idle_share", p.idle_share, th.idle_share,
                            "TensorRT-LLM idle ratio > 0.30; HTA idle time",
                            "no step ran for this share of the window: the engine waits for "
                            "requests"));
  if (sums.steps == 0) {
    if (p.edge_busy_us > 0 && !v.signals[0].crossed) {
      // Busy (nearly) all along, but no step finished inside the window: nothing to judge
      // yet. A sliver of a step at an edge (the last one's event delivery) is still idle.
      v.bottleneck = Bottleneck::kUnknown;
      v.summary = absl::StrFormat(
          "UNKNOWN: a step ran through %.0f%% of the %.1f s window without finishing inside it; "
          "ask for a longer window",
          100 * p.busy_fraction, p.window_s);
      v.window_note = "no complete step in the window";
      return v;
    }
    v.bottleneck = Bottleneck::kUnderloaded;
    v.summary = "UNDERLOADED: no step ran in the window";
    return v;
  }
  // Step-level sums over the busy steps.
  const double launch = LaunchUs(sums, cal);
  // Schedule and postprocess count where the device waited for them: with the overlapped loop,
  // less the part hidden behind the device's next step (StepRecord::hidden_host_us), taken
  // from both in proportion.
  const double overlappable = sums.schedule_us + sums.postprocess_us;
  const double exposed =
      overlappable > 0 ? std::max(0.0, 1.0 - sums.hidden_host_us / overlappable) : 1.0;
  const double schedule = sums.schedule_us * exposed, prepare = sums.prepare_us,
               postprocess = sums.postprocess_us * exposed;
  const double busy = sums.device_busy_in_wall_us;
  const bool graphs = sums.any_graph_replayed;
  double wall = sums.wall_us, mem = 0, cmp = 0, floor = 0;
  auto add_floor = [&](double bytes, double flops) {
    const double m = cal.bandwidth_bytes_per_s > 0 ? bytes / cal.bandwidth_bytes_per_s : 0;
    const double c = cal.gemm_flops_per_s > 0 ? flops / cal.gemm_flops_per_s : 0;
    mem += m * 1e6, cmp += c * 1e6, floor += std::max(m, c) * 1e6;
  };
  for (const StepRecord& r : steps) {
    for (const OpClassStats& c : r.by_class) add_floor(c.bytes, c.flops);
  }
  // Steps kept only as sums: each class's floor over its summed bytes and FLOPs (at most the
  // per-step floors' sum; the same where a class's intensity holds steady, as in decode).
  for (const StepSums::Class& c : ctx.earlier.by_class) add_floor(c.bytes, c.flops);
  // The engine loop's own gaps between steps are host time the device waits through.
  const double host = schedule + prepare + postprocess + p.loop_gap_us;
  const double n_steps = static_cast<double>(sums.steps);
  v.host_per_step = {schedule / n_steps,      prepare / n_steps,       postprocess / n_steps,
                     p.loop_gap_us / n_steps, sums.hidden_host_us > 0, ctx.backend == "cuda"};
  wall = std::max(wall + p.loop_gap_us, 1e-9);
  const double overhead = launch + host;
  Signal over =
      Above("overhead_vs_roofline_floor", floor > 0 ? overhead / floor : 1e9, 1.0, kCalibrated,
            "launch cost (ops issued x dispatch cost, graph replays x graph launch cost) + "
            "host phases exceed the time the step's "
            "FLOPs and bytes need at the calibrated ceilings");
  // The dispatch cost was calibrated on a core of its own; under contention the steps' wall
  // time also holds the time their threads waited for a core, so the share is of the time
  // they ran (wall x run share).
  Signal ls = Above("launch_share", launch / (wall * v.run_share), th.launch_share, kTrtllm,
                    v.run_share < 1 ? "launch cost (ops issued x dispatch cost, graph replays x "
                                      "graph launch cost) / the step time the engine's threads "
                                      "had a core (wall x cpu_run_share)"
                                    : "launch cost (ops issued x dispatch cost, graph replays x "
                                      "graph launch cost) / step time");
  Signal hs = Above("host_share", host / wall, th.host_share, kTrtllm,
                    "schedule + prepare + postprocess + loop gaps / step time");
  const double gap_th = graphs ? th.device_gap_share_graphs : th.device_gap_share;
  Signal gs = Above("device_idle_in_step", 1.0 - busy / wall, gap_th, kTrtllm,
                    "device idle inside steps (step time - device busy) / step time");
  const bool launch_bound = over.crossed && (ls.crossed || hs.crossed || gs.crossed);
  // The overhead is the server's host path, not op launches: host phases over their threshold,
  // the device idle inside steps, launches under theirs and at most the host time (the H200
  // run, graphs on, small at c=64: device idle 37 % of each step, host phases 35 %, one launch
  // a step). No launch-side change (graphs, fewer ops) removes it.
  const bool host_bound = launch_bound && hs.crossed && gs.crossed && !ls.crossed && host >= launch;
  Signal cm = Above("compute_vs_memory_floor", mem > 0 ? cmp / mem : 1e9, 1.0,
                    "roofline (Williams et al. 2008): intensity above the ridge",
                    "FLOPs/peak exceeds bytes/bandwidth (= intensity / ridge point)");
  v.signals.insert(v.signals.end(), {over, ls, hs, gs, cm});
  v.step_bound = host_bound     ? Bottleneck::kHostBound
                 : launch_bound ? Bottleneck::kLaunchBound
                 : cm.crossed   ? Bottleneck::kComputeBound
                                : Bottleneck::kMemoryBound;

  const int max_seqs = ctx.options.max_num_seqs > 0 ? ctx.options.max_num_seqs : 1;
  Signal q = Below("max_waiting_requests", p.max_queue_depth, 0.5, "serving state",
                   "no request waited in the window (demand, not the server, sets the batch)");
  Signal fill = Below("batch_fill", p.mean_batch_seqs / max_seqs, th.underfilled_batch,
                      "vLLM num_requests_running vs max_num_seqs",
                      "mean batch / max_num_seqs: the batch is far under what the server allows");
  v.signals.insert(v.signals.end(), {q, fill});
  if (v.run_share < 1) {
    v.signals.push_back(Below("cpu_run_share", v.run_share, th.contended_run_share,
                              "Linux schedstat (run time vs run-queue wait, as perf sched)",
                              "of the time the engine's threads were runnable, the share they "
                              "had a core: under it, other processes held the cores and every "
                              "step ran slower for it"));
  }
  const bool demand_limited =
      q.crossed && fill.crossed && v.step_bound != Bottleneck::kComputeBound;

  const bool idle = v.signals[0].crossed;
  if (idle) {
    v.bottleneck = Bottleneck::kUnderloaded;
  } else if (v.step_bound == Bottleneck::kLaunchBound || v.step_bound == Bottleneck::kHostBound) {
    v.bottleneck = v.step_bound;
  } else if (demand_limited) {
    v.bottleneck = Bottleneck::kUnderloaded;
  } else {
    v.bottleneck = v.step_bound;
  }
  NameHeadroom(sums, p, cal, th, &v);
  switch (v.bottleneck) {
    case Bottleneck::kUnderloaded:
      v.summary = idle ? absl::StrFormat(
                             "UNDERLOADED: the engine was idle %.0f%% of the window waiting for "
                             "requests; its steps are %s",
                             100 * p.idle_share, BottleneckName(v.step_bound))
                       : absl::StrFormat(
                             "UNDERLOADED: no request waits and the batch (%.1f) is under "
                             "%.0f%% of max_num_seqs=%d; steps are %s",
                             p.mean_batch_seqs, 100 * th.underfilled_batch, max_seqs,
                             BottleneckName(v.step_bound));
      break;
    case Bottleneck::kLaunchBound:
      v.summary = absl::StrFormat(
          "LAUNCH_BOUND: per-step overhead (%.0f us dispatch + %.0f us host) is %.1fx the "
          "roofline floor (%.0f us); the device waits on the host",
          launch / n_steps, host / n_steps, over.value, floor / n_steps);
      break;
    case Bottleneck::kHostBound: {
      const double n = n_steps;
      v.summary = absl::StrFormat(
          "HOST_BOUND: the server's host path takes %.0f us of each %.0f us step (schedule %.1f, "
          "prepare %.1f, postprocess: scheduler update and %s %.1f, loop gaps %.1f us) "
          "and the device idles %.0f%% of it; op launches cost %.0f us. %s; every request adds "
          "host work to each step, so batching gains only where the plan's measured steps say "
          "so",
          host / n, wall / n, schedule / n, prepare / n,
          ctx.event_thread ? "the hand-off of token events to their thread"
                           : "token events (stream writes) on the engine thread",
          postprocess / n, p.loop_gap_us / n, 100 * gs.value, launch / n,
          HostPathChange(v, ctx.event_thread));
      break;
    }
    case Bottleneck::kMemoryBound:
      v.summary = absl::StrFormat(
          "MEMORY_BOUND: intensity %.1f FLOP/B under the ridge %.1f; MBU %.0f%%, MFU %.1f%% at "
          "busy %.0f%%",
          p.intensity, p.ridge, 100 * p.mbu, 100 * p.mfu, 100 * p.busy_fraction);
      break;
    case Bottleneck::kComputeBound:
      v.summary = absl::StrFormat(
          "COMPUTE_BOUND: intensity %.1f FLOP/B over the ridge %.1f; MFU %.0f%%, MBU %.0f%% at "
          "busy %.0f%%",
          p.intensity, p.ridge, 100 * p.mfu, 100 * p.mbu, 100 * p.busy_fraction);
      break;
    case Bottleneck::kUnknown:
    case Bottleneck::kCount:
      break;
  }
  if (v.far_below_roofs && !v.headroom.empty() &&
      (v.bottleneck == Bottleneck::kMemoryBound || v.bottleneck == Bottleneck::kComputeBound)) {
    absl::StrAppend(&v.summary, absl::StrFormat(" -- but far below both roofs (steps at %.0f%% of "
                                                "peak FLOP/s, %.0f%% of bandwidth):",
                                                100 * v.step_mfu, 100 * v.step_mbu));
    for (const Headroom& h : v.headroom) {
      absl::StrAppend(
          &v.summary,
          absl::StrFormat(" %s takes %.0f%% of the step at %.0f%% of its roof "
                          "(at its roof: step -%.0f%%, %.2fx tokens/s);",
                          OpClassName(h.op_class), 100 * h.step_share, 100 * h.roofline_efficiency,
                          100 * h.step_saved_share, h.speedup));
    }
    v.summary.pop_back();
    if (v.run_share < th.contended_run_share) {
      absl::StrAppend(&v.summary,
                      absl::StrFormat("; the server's threads ran only %.0f%% of the time they "
                                      "were runnable (other processes held the cores), so part "
                                      "of this gap is theirs, not the kernels'",
                                      100 * v.run_share));
    }
  } else if (v.run_share < th.contended_run_share && sums.steps > 0) {
    absl::StrAppend(&v.summary,
                    absl::StrFormat(" (contended: the engine's threads ran %.0f%% of the time "
                                    "they were runnable; other processes held the cores)",
                                    100 * v.run_share));
  }
  // Too few complete steps: say so (the server widens the window when it can, see
  // diagnostics_state.cc; when it could not, the verdict stands qualified).
  if (sums.steps < th.min_window_steps) {
    v.window_note = absl::StrFormat(
        "the window holds only %d complete step%s (mean %.0f ms)%s: a tentative verdict",
        static_cast<int>(sums.steps), sums.steps == 1 ? "" : "s", p.mean_step_ms,
        ctx.step_in_flight ? ", one more in flight at its end" : "");
  } else if (ctx.widened_from_s > 0) {
    v.window_note = absl::StrFormat(
        "the %.1f s window asked for held fewer than %d complete steps: widened to %.1f s",
        ctx.widened_from_s, th.min_window_steps, p.window_s);
  } else if (p.summed_steps > 0) {
    const double records_s =
        steps.empty() ? 0 : (steps.back().end_us - steps.front().start_us) * 1e-6;
    v.window_note = absl::StrFormat(
        "covers %.1f s of the %.1f s asked (%s): the newest %zu steps (%.1f s) as records and "
        "the %d before them as the step history's per-second sums; the step model and plan "
        "read the records (--step_history_mb sets how many)",
        p.window_s, ctx.truncated_from_s,
        ctx.earlier_cut ? "the per-second sums reach back no further"
                        : "from its first whole second",
        steps.size(), records_s, p.summed_steps);
  } else if (ctx.truncated_from_s > 0) {
    v.window_note = absl::StrFormat(
        "covers the last %.1f s of the %.1f s asked: the step history holds the last %zu steps "
        "(--step_history_mb sets its memory)",
        p.window_s, ctx.truncated_from_s, ctx.ring_steps);
  } else if (ctx.step_in_flight && p.edge_busy_us > 0.05 * p.window_s * 1e6) {
    v.window_note = absl::StrFormat(
        "a step was in flight at the window's edge: its %.0f ms inside the window count as busy",
        p.edge_busy_us * 1e-3);
  }
  if (!v.window_note.empty() && sums.steps < th.min_window_steps) {
    absl::StrAppend(&v.summary, " (", v.window_note, ")");
  }
  return v;
}

}  // namespace saturn
