// The bottleneck class and the signals that decided it (docs/DIAGNOSTICS.md, "Verdict").
//
//   engine idle share > 0.30                              -> UNDERLOADED (device waits for work)
//   per-step overhead (op count x calibrated dispatch + host phases) > the step's roofline
//     floor, and one TRT-LLM host signal crossed        -> LAUNCH_BOUND
//   queue empty and batch < 0.5 x max_num_seqs, steps not compute-bound -> UNDERLOADED
//   collectives (tensor parallelism) > 10 % of step time and > the steps' roofline floor
//                                                         -> COMMUNICATION_BOUND
//   roofline: FLOPs/peak vs bytes/bandwidth summed per class -> COMPUTE_ or MEMORY_BOUND
#include <algorithm>
#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/diag/analyzer.h"
#include "kernels/base/enum_table.h"

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
  for (size_t c = 0; c < kNumOpClasses; ++c) {
    if (OnTheRoofline(c)) flops += s.by_class[c].flops, bytes += s.by_class[c].bytes;
  }
  const double wall = s.wall_us, timed_wall = s.timed_wall_us;
  if (wall <= 0) return;
  v->step_mfu = cal.gemm_flops_per_s > 0 ? flops / (wall * 1e-6) / cal.gemm_flops_per_s : 0;
  v->step_mbu =
      cal.bandwidth_bytes_per_s > 0 ? bytes / (wall * 1e-6) / cal.bandwidth_bytes_per_s : 0;
  v->far_below_roofs = v->step_mfu < th.far_below_roofs && v->step_mbu < th.far_below_roofs;
  if (timed_wall <= 0) return;
  for (const ClassProfile& c : p.classes) {
    if (!OnTheRoofline(static_cast<size_t>(c.op_class))) continue;
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
  static constexpr std::array kNames{
      "UNKNOWN",       "UNDERLOADED", "LAUNCH_BOUND",       "MEMORY_BOUND",
      "COMPUTE_BOUND", "HOST_BOUND",  "COMMUNICATION_BOUND"};
  return EnumLookup(kNames, b, "UNKNOWN");
}

std::string HostPathChange(const Verdict& v, bool event_thread) {
  const Verdict::HostPhases& h = v.host_per_step;
  const double largest = std::max({h.schedule_us, h.prepare_us, h.postprocess_us, h.loop_gap_us});
  if (largest <= 0) {
    return "host work overlapped with the device, or less of it per token, would recover it";
  }
  // "the largest phase is <name> (<us> us<detail>): <change>".
  auto phase = [largest](std::string_view name, std::string_view detail, std::string_view change) {
    return absl::StrFormat("the largest phase is %s (%.0f us%s): %s", name, largest, detail,
                           change);
  };
  constexpr std::string_view kGrowing = " a step, growing with the running requests";
  if (largest == h.postprocess_us && !event_thread) {
    return phase("postprocess", "",
                 "the token events (tokenizing, building and writing each stream's message) run "
                 "on the engine thread; saturn-server --event_thread=on moves them to their own "
                 "thread while the next step runs (auto does so on CUDA and where the CPU "
                 "backend leaves a core free)");
  }
  if (largest == h.postprocess_us) {
    return phase("postprocess", "",
                 "the scheduler update, and the engine waiting for the event thread when the "
                 "streams' writes fall 4 steps behind; fewer streams per replica or less work "
                 "per event would recover it");
  }
  if (largest == h.loop_gap_us) {
    return phase("the gap between steps", "",
                 "the engine thread waits to be woken or for a core (see cpu_run_share); fewer "
                 "other processes on the host's cores would recover it");
  }
  if (h.overlapped && largest == h.schedule_us) {
    return phase("schedule",
                 " a step left after the overlapped loop hid what the device's step covers",
                 "the host's schedule and postprocess outlast the device's step; fewer running "
                 "requests per replica would recover it");
  }
  if (largest == h.prepare_us) {
    return phase("prepare", kGrowing,
                 "building and uploading the step's inputs runs between the device's steps even "
                 "with the overlapped loop (the inputs wait for the previous step's tokens); "
                 "fewer running requests per replica would recover it");
  }
  if (!h.device_async) {
    return phase("schedule", kGrowing,
                 "the backend runs its ops on the host as they are issued, so there is no device "
                 "step to hide it behind; fewer running requests per replica would recover it");
  }
  return phase("schedule", kGrowing,
               "saturn-server --async_scheduling=on overlaps it with the device's step (as vLLM "
               "v1's async scheduling and SGLang's overlap scheduler do)");
}

namespace {

// What the window's busy steps cost, summed over them (us): the numbers the class is decided
// from, before any threshold.
struct StepCosts {
  double steps = 0;
  double launch = 0;  // ops issued x dispatch cost, graph replays x graph launch cost
  // Host phases the device waited for: with the overlapped loop, schedule and postprocess less
  // the part hidden behind the device's next step (StepRecord::hidden_host_us), taken from
  // both in proportion. The engine loop's own gaps between steps count too.
  double schedule = 0, prepare = 0, postprocess = 0, loop_gap = 0, host = 0;
  double wall = 0;         // step wall time plus the loop gaps
  double device_busy = 0;  // device busy time inside the steps
  // The time the steps' bytes and FLOPs need at the calibrated ceilings: each alone, and the
  // roofline floor (the larger of the two per op class). Collectives are not in them: their
  // bytes cross between ranks, not through the roofline's memory.
  double memory_floor = 0, compute_floor = 0, roofline_floor = 0;
  double comm = 0;  // timed in collectives (tensor parallelism; rank 0's)
  double comm_bytes = 0;
  int64_t collectives = 0;
};

StepCosts MeasureCosts(const std::vector<StepRecord>& steps, const StepSums& sums, const Profile& p,
                       const Calibration& cal, const AnalyzerContext& ctx) {
  StepCosts c;
  c.steps = static_cast<double>(sums.steps);
  c.launch = LaunchUs(sums, cal);
  const double overlappable = sums.schedule_us + sums.postprocess_us;
  const double exposed =
      overlappable > 0 ? std::max(0.0, 1.0 - sums.hidden_host_us / overlappable) : 1.0;
  c.schedule = sums.schedule_us * exposed;
  c.prepare = sums.prepare_us;
  c.postprocess = sums.postprocess_us * exposed;
  c.loop_gap = p.loop_gap_us;
  c.host = c.schedule + c.prepare + c.postprocess + c.loop_gap;
  c.wall = std::max(sums.wall_us + p.loop_gap_us, 1e-9);
  c.device_busy = sums.device_busy_in_wall_us;
  auto add_floor = [&](double bytes, double flops) {
    const double m = cal.bandwidth_bytes_per_s > 0 ? bytes / cal.bandwidth_bytes_per_s : 0;
    const double f = cal.gemm_flops_per_s > 0 ? flops / cal.gemm_flops_per_s : 0;
    c.memory_floor += m * 1e6, c.compute_floor += f * 1e6, c.roofline_floor += std::max(m, f) * 1e6;
  };
  constexpr size_t kComm = static_cast<size_t>(OpClass::kComm);
  for (const StepRecord& r : steps) {
    for (size_t k = 0; k < r.by_class.size(); ++k) {
      if (OnTheRoofline(k)) add_floor(r.by_class[k].bytes, r.by_class[k].flops);
    }
    c.comm += r.by_class[kComm].device_us;
    c.comm_bytes += r.by_class[kComm].bytes;
    c.collectives += r.by_class[kComm].count;
  }
  // Steps kept only as sums: each class's floor over its summed bytes and FLOPs (at most the
  // per-step floors' sum; the same where a class's intensity holds steady, as in decode).
  for (size_t k = 0; k < ctx.earlier.by_class.size(); ++k) {
    if (OnTheRoofline(k)) add_floor(ctx.earlier.by_class[k].bytes, ctx.earlier.by_class[k].flops);
  }
  c.comm += ctx.earlier.by_class[kComm].timed_us;
  return c;
}

// The thresholds crossed or not, each under its own name, in the order the report lists them.
struct Evidence {
  Signal engine_idle, overhead, launch_share, host_share, device_idle, compute_vs_memory,
      no_waiting, batch_fill;
  std::optional<Signal> cpu_run_share;  // only where the threads waited for a core
  // Only under tensor parallelism (collectives in the steps).
  std::optional<Signal> comm_share, comm_vs_floor;

  std::vector<Signal> List() const {
    std::vector<Signal> out{engine_idle, overhead,          launch_share, host_share,
                            device_idle, compute_vs_memory, no_waiting,   batch_fill};
    if (cpu_run_share) out.push_back(*cpu_run_share);
    if (comm_share) out.push_back(*comm_share);
    if (comm_vs_floor) out.push_back(*comm_vs_floor);
    return out;
  }
  bool communication_bound() const {
    return comm_share && comm_share->crossed && comm_vs_floor->crossed;
  }
};

Signal EngineIdle(const Profile& p, const AnalyzerThresholds& th) {
  return Above("engine_idle_share", p.idle_share, th.idle_share,
               "TensorRT-LLM idle ratio > 0.30; HTA idle time",
               "no step ran for this share of the window: the engine waits for requests");
}

Evidence Weigh(const StepCosts& c, const Profile& p, const AnalyzerContext& ctx,
               const AnalyzerThresholds& th, double run_share, bool graphs) {
  Evidence e;
  e.engine_idle = EngineIdle(p, th);
  e.overhead =
      Above("overhead_vs_roofline_floor",
            c.roofline_floor > 0 ? (c.launch + c.host) / c.roofline_floor : 1e9, 1.0, kCalibrated,
            "launch cost (ops issued x dispatch cost, graph replays x graph launch cost) + "
            "host phases exceed the time the step's "
            "FLOPs and bytes need at the calibrated ceilings");
  // The dispatch cost was calibrated on a core of its own; under contention the steps' wall
  // time also holds the time their threads waited for a core, so the share is of the time
  // they ran (wall x run share).
  e.launch_share = Above("launch_share", c.launch / (c.wall * run_share), th.launch_share, kTrtllm,
                         run_share < 1 ? "launch cost (ops issued x dispatch cost, graph replays x "
                                         "graph launch cost) / the step time the engine's threads "
                                         "had a core (wall x cpu_run_share)"
                                       : "launch cost (ops issued x dispatch cost, graph replays x "
                                         "graph launch cost) / step time");
  e.host_share = Above("host_share", c.host / c.wall, th.host_share, kTrtllm,
                       "schedule + prepare + postprocess + loop gaps / step time");
  e.device_idle = Above("device_idle_in_step", 1.0 - c.device_busy / c.wall,
                        graphs ? th.device_gap_share_graphs : th.device_gap_share, kTrtllm,
                        "device idle inside steps (step time - device busy) / step time");
  e.compute_vs_memory =
      Above("compute_vs_memory_floor", c.memory_floor > 0 ? c.compute_floor / c.memory_floor : 1e9,
            1.0, "roofline (Williams et al. 2008): intensity above the ridge",
            "FLOPs/peak exceeds bytes/bandwidth (= intensity / ridge point)");
  const int max_seqs = ctx.options.max_num_seqs > 0 ? ctx.options.max_num_seqs : 1;
  e.no_waiting = Below("max_waiting_requests", p.max_queue_depth, 0.5, "serving state",
                       "no request waited in the window (demand, not the server, sets the batch)");
  e.batch_fill = Below("batch_fill", p.mean_batch_seqs / max_seqs, th.underfilled_batch,
                       "vLLM num_requests_running vs max_num_seqs",
                       "mean batch / max_num_seqs: the batch is far under what the server allows");
  if (c.collectives > 0 || ctx.tp.ranks > 1) {
    e.comm_share = Above("comm_share", c.comm / c.wall, th.comm_share,
                         "HTA communication / computation breakdown (exposed communication)",
                         "time in the ranks' collectives (all-reduces, transfer and waits for a "
                         "slower rank) / step time; no overlap, so all of it is exposed");
    e.comm_vs_floor = Above(
        "comm_vs_roofline_floor", c.roofline_floor > 0 ? c.comm / c.roofline_floor : 1e9, 1.0,
        "derived: collectives vs the steps' roofline floor (Pope et al. 2022, 1D layouts)",
        "collective time exceeds the time the steps' own FLOPs and bytes need at the calibrated "
        "ceilings");
  }
  if (run_share < 1) {
    e.cpu_run_share = Below("cpu_run_share", run_share, th.contended_run_share,
                            "Linux schedstat (run time vs run-queue wait, as perf sched)",
                            "of the time the engine's threads were runnable, the share they "
                            "had a core: under it, other processes held the cores and every "
                            "step ran slower for it");
  }
  return e;
}

// Where the window's collectives went between the ranks: rank 0's step records for the time and
// bytes, the ranks' logs (ctx.tp) for transfer against wait and the load balance.
TensorParallelProfile TensorParallel(const StepCosts& c, const Profile& p, const Calibration& cal,
                                     const AnalyzerContext& ctx) {
  TensorParallelProfile t;
  if (ctx.tp.ranks <= 1 && c.collectives == 0) return t;
  const TpStats& s = ctx.tp;
  t.ranks = s.ranks;
  t.transport = s.transport;
  t.single_host = s.single_host;
  t.steps = s.steps;
  t.collectives_per_step = c.steps > 0 ? c.collectives / c.steps : 0;
  t.mean_collective_us = c.collectives > 0 ? c.comm / c.collectives : 0;
  t.mean_collective_bytes = c.collectives > 0 ? c.comm_bytes / c.collectives : 0;
  t.comm_share = c.wall > 0 ? c.comm / c.wall : 0;
  t.comm_vs_roofline_floor = c.roofline_floor > 0 ? c.comm / c.roofline_floor : 0;
  if (s.steps > 0) {
    t.wait_share = s.WaitShare();
    t.transfer_share = 1 - t.wait_share;
    t.load_balance = s.LoadBalance();
    t.slowest_rank = s.SlowestRank();
    t.slowest_over_fastest = s.SlowestOverFastest();
    t.slowest_run_share = s.per_rank[t.slowest_rank].RunShare();
    // The window's mean all-reduce: its steps' mean token rows of the hidden size, f32.
    const double n = s.ranks,
                 bus = 2 * (n - 1) / n * p.mean_batch_tokens * ctx.model.hidden_size * 4;
    t.transfer_us = s.collectives > 0 ? s.transfer_us / s.collectives : 0;
    t.calibrated_us = cal.AllReduceUs(bus);
    t.transfer_vs_calibrated = t.calibrated_us > 0 ? t.transfer_us / t.calibrated_us : 0;
  }
  return t;
}

// Whether the slowest rank's threads had their cores: "; its threads had a core 62% of ...".
std::string RunShareClause(double run_share) {
  if (run_share < 0) return "";
  return absl::StrFormat("; its threads had a core %.0f%% of the time they were runnable%s",
                         100 * run_share,
                         run_share < 0.9 ? " (contended: other processes held its cores)" : "");
}

// COMMUNICATION_BOUND's sentence: which part of the collectives' time dominates, waits for a
// slower rank (serialisation) or moving the bytes (transfer).
std::string CommunicationSentence(const TensorParallelProfile& t) {
  std::string out = absl::StrFormat(
      "COMMUNICATION_BOUND: collectives take %.0f%% of the step (%.0f a step, %.0f us each at "
      "%.0f KB), %.1fx the time the step's own work needs at the roofline",
      100 * t.comm_share, t.collectives_per_step, t.mean_collective_us,
      t.mean_collective_bytes / 1024, t.comm_vs_roofline_floor);
  if (t.steps == 0)
    return out + "; the workers' logs were not read, so wait and transfer are unsplit";
  if (t.wait_share >= 0.5) {
    absl::StrAppend(&out,
                    absl::StrFormat("; wait %.0f%%: rank %d computes %.2fx longer than the fastest "
                                    "(load balance %.2f)%s, and the others wait for it in every "
                                    "all-reduce",
                                    100 * t.wait_share, t.slowest_rank, t.slowest_over_fastest,
                                    t.load_balance, RunShareClause(t.slowest_run_share)));
  } else {
    absl::StrAppend(
        &out,
        absl::StrFormat(
            "; transfer %.0f%%: %.0f all-reduces x %.0f us at %.0f KB over %s%s%s",
            100 * t.transfer_share, t.collectives_per_step, t.mean_collective_us * t.transfer_share,
            t.mean_collective_bytes / 1024, t.transport,
            t.calibrated_us > 0 ? absl::StrFormat(" (a transfer %.1fx the %.0f us the link was "
                                                  "calibrated at)",
                                                  t.transfer_vs_calibrated, t.calibrated_us)
                                : std::string(),
            t.single_host ? "; the ranks share one host's memory, so they add "
                            "no bandwidth to pay for it"
                          : ""));
  }
  return out;
}

// Beside any other class under tensor parallelism: the collectives' share and the ranks'
// balance, so a rank spinning in an all-reduce (busy 100 %) shows for what it is.
std::string TensorParallelSentence(const TensorParallelProfile& t) {
  std::string out = absl::StrFormat(
      "; tensor parallel over %d ranks (%s): collectives %.0f%% of "
      "the step",
      t.ranks, t.transport, 100 * t.comm_share);
  if (t.steps > 0) {
    absl::StrAppend(&out, absl::StrFormat(" (wait %.0f%%), load balance %.2f, slowest rank %d "
                                          "(%.2fx the fastest's compute)",
                                          100 * t.wait_share, t.load_balance, t.slowest_rank,
                                          t.slowest_over_fastest));
    if (t.load_balance < 0.9) out += RunShareClause(t.slowest_run_share);
  }
  return out;
}

// The class from the evidence: what bounds the steps, then what bounds serving.
void Decide(const StepCosts& c, const Evidence& e, Verdict* v) {
  const bool launch_bound = e.overhead.crossed && (e.launch_share.crossed || e.host_share.crossed ||
                                                   e.device_idle.crossed);
  // The overhead is the server's host path, not op launches: host phases over their threshold,
  // the device idle inside steps, launches under theirs and at most the host time (as in a
  // graphs-on GPU run at high concurrency: docs/CUDA.md). No launch-side change (graphs, fewer
  // ops) removes it.
  const bool host_bound = launch_bound && e.host_share.crossed && e.device_idle.crossed &&
                          !e.launch_share.crossed && c.host >= c.launch;
  v->step_bound = host_bound                    ? Bottleneck::kHostBound
                  : launch_bound                ? Bottleneck::kLaunchBound
                  : e.communication_bound()     ? Bottleneck::kCommunicationBound
                  : e.compute_vs_memory.crossed ? Bottleneck::kComputeBound
                                                : Bottleneck::kMemoryBound;
  const bool demand_limited =
      e.no_waiting.crossed && e.batch_fill.crossed && v->step_bound != Bottleneck::kComputeBound;
  if (e.engine_idle.crossed) {
    v->bottleneck = Bottleneck::kUnderloaded;
  } else if (launch_bound) {
    v->bottleneck = v->step_bound;
  } else if (demand_limited) {
    v->bottleneck = Bottleneck::kUnderloaded;
  } else {
    v->bottleneck = v->step_bound;
  }
}

// The verdict's first sentence: the class and the numbers that decided it.
std::string ClassSentence(const StepCosts& c, const Evidence& e, const Profile& p,
                          const AnalyzerContext& ctx, const AnalyzerThresholds& th,
                          const Verdict& v) {
  const double n = c.steps;
  switch (v.bottleneck) {
    case Bottleneck::kUnderloaded:
      if (e.engine_idle.crossed) {
        return absl::StrFormat(
            "UNDERLOADED: the engine was idle %.0f%% of the window waiting for requests; its "
            "steps are %s",
            100 * p.idle_share, BottleneckName(v.step_bound));
      }
      return absl::StrFormat(
          "UNDERLOADED: no request waits and the batch (%.1f) is under %.0f%% of "
          "max_num_seqs=%d; steps are %s",
          p.mean_batch_seqs, 100 * th.underfilled_batch,
          ctx.options.max_num_seqs > 0 ? ctx.options.max_num_seqs : 1,
          BottleneckName(v.step_bound));
    case Bottleneck::kLaunchBound:
      return absl::StrFormat(
          "LAUNCH_BOUND: per-step overhead (%.0f us dispatch + %.0f us host) is %.1fx the "
          "roofline floor (%.0f us); the device waits on the host",
          c.launch / n, c.host / n, e.overhead.value, c.roofline_floor / n);
    case Bottleneck::kHostBound:
      return absl::StrFormat(
          "HOST_BOUND: the server's host path takes %.0f us of each %.0f us step (schedule %.1f, "
          "prepare %.1f, postprocess: scheduler update and %s %.1f, loop gaps %.1f us) "
          "and the device idles %.0f%% of it; op launches cost %.0f us. %s; every request adds "
          "host work to each step, so batching gains only where the plan's measured steps say "
          "so",
          c.host / n, c.wall / n, c.schedule / n, c.prepare / n,
          ctx.event_thread ? "the hand-off of token events to their thread"
                           : "token events (stream writes) on the engine thread",
          c.postprocess / n, c.loop_gap / n, 100 * e.device_idle.value, c.launch / n,
          HostPathChange(v, ctx.event_thread));
    case Bottleneck::kMemoryBound:
      return absl::StrFormat(
          "MEMORY_BOUND: intensity %.1f FLOP/B under the ridge %.1f; MBU %.0f%%, MFU %.1f%% at "
          "busy %.0f%%",
          p.intensity, p.ridge, 100 * p.mbu, 100 * p.mfu, 100 * p.busy_fraction);
    case Bottleneck::kComputeBound:
      return absl::StrFormat(
          "COMPUTE_BOUND: intensity %.1f FLOP/B over the ridge %.1f; MFU %.0f%%, MBU %.0f%% at "
          "busy %.0f%%",
          p.intensity, p.ridge, 100 * p.mfu, 100 * p.mbu, 100 * p.busy_fraction);
    case Bottleneck::kCommunicationBound:
      return CommunicationSentence(v.tensor_parallel);
    case Bottleneck::kUnknown:
    case Bottleneck::kCount:
      break;
  }
  return "";
}

// After the class: the op classes furthest below their roofs where a roofline class sits far
// below both, and contention where the threads waited for a core.
std::string HeadroomSentence(const Verdict& v, const AnalyzerThresholds& th) {
  std::string out;
  if (v.far_below_roofs && !v.headroom.empty() &&
      (v.bottleneck == Bottleneck::kMemoryBound || v.bottleneck == Bottleneck::kComputeBound)) {
    out = absl::StrFormat(
        " -- but far below both roofs (steps at %.0f%% of peak FLOP/s, %.0f%% of bandwidth):",
        100 * v.step_mfu, 100 * v.step_mbu);
    for (const Headroom& h : v.headroom) {
      absl::StrAppend(
          &out, absl::StrFormat(" %s takes %.0f%% of the step at %.0f%% of its roof "
                                "(at its roof: step -%.0f%%, %.2fx tokens/s);",
                                OpClassName(h.op_class), 100 * h.step_share,
                                100 * h.roofline_efficiency, 100 * h.step_saved_share, h.speedup));
    }
    out.pop_back();
    if (v.run_share < th.contended_run_share) {
      absl::StrAppend(&out, absl::StrFormat("; the server's threads ran only %.0f%% of the time "
                                            "they were runnable (other processes held the "
                                            "cores), so part of this gap is theirs, not the "
                                            "kernels'",
                                            100 * v.run_share));
    }
  } else if (v.run_share < th.contended_run_share) {
    out = absl::StrFormat(
        " (contended: the engine's threads ran %.0f%% of the time they were runnable; other "
        "processes held the cores)",
        100 * v.run_share);
  }
  return out;
}

// What the window held: too few steps, widened, cut to the history, or a step at its edge.
std::string WindowNote(const std::vector<StepRecord>& steps, const StepSums& sums, const Profile& p,
                       const AnalyzerContext& ctx, const AnalyzerThresholds& th) {
  // Too few complete steps: say so (the server widens the window when it can, see
  // diagnostics_session.cc; when it could not, the verdict stands qualified).
  if (sums.steps < th.min_window_steps) {
    return absl::StrFormat(
        "the window holds only %d complete step%s (mean %.0f ms)%s: a tentative verdict",
        static_cast<int>(sums.steps), sums.steps == 1 ? "" : "s", p.mean_step_ms,
        ctx.step_in_flight ? ", one more in flight at its end" : "");
  }
  if (ctx.widened_from_s > 0) {
    return absl::StrFormat(
        "the %.1f s window asked for held fewer than %d complete steps: widened to %.1f s",
        ctx.widened_from_s, th.min_window_steps, p.window_s);
  }
  if (p.summed_steps > 0) {
    const double records_s =
        steps.empty() ? 0 : (steps.back().end_us - steps.front().start_us) * 1e-6;
    return absl::StrFormat(
        "covers %.1f s of the %.1f s asked (%s): the newest %zu steps (%.1f s) as records and "
        "the %d before them as the step history's per-second sums; the step model and plan "
        "read the records (--step_history_mb sets how many)",
        p.window_s, ctx.truncated_from_s,
        ctx.earlier_cut ? "the per-second sums reach back no further"
                        : "from its first whole second",
        steps.size(), records_s, p.summed_steps);
  }
  if (ctx.truncated_from_s > 0) {
    return absl::StrFormat(
        "covers the last %.1f s of the %.1f s asked: the step history holds the last %zu steps "
        "(--step_history_mb sets its memory)",
        p.window_s, ctx.truncated_from_s, ctx.ring_steps);
  }
  if (ctx.step_in_flight && p.edge_busy_us > 0.05 * p.window_s * 1e6) {
    return absl::StrFormat(
        "a step was in flight at the window's edge: its %.0f ms inside the window count as busy",
        p.edge_busy_us * 1e-3);
  }
  return "";
}

// A window with no complete step: busy all along (nothing to judge yet) or idle.
Verdict NoStepVerdict(const Profile& p, const AnalyzerThresholds& th, Verdict v) {
  if (p.edge_busy_us > 0 && !v.signals[0].crossed) {
    // A sliver of a step at an edge (the last one's event delivery) is still idle.
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

}  // namespace

Verdict Classify(const std::vector<StepRecord>& steps, const Profile& p, const Calibration& cal,
                 const AnalyzerContext& ctx, const AnalyzerThresholds& th) {
  Verdict v;
  // The steps' own threads over the window where measured, else the server's since the
  // previous report.
  const StepSums sums = SumWindow(steps, ctx, th);
  const double step_share = StepRunShare(sums);
  v.run_share = std::clamp(step_share >= 0 ? step_share : ctx.run_share, 0.05, 1.0);
  if (sums.steps == 0) {
    v.signals.push_back(EngineIdle(p, th));
    return NoStepVerdict(p, th, std::move(v));
  }
  // Deciding: costs, then thresholds, then the class.
  const StepCosts c = MeasureCosts(steps, sums, p, cal, ctx);
  const Evidence e = Weigh(c, p, ctx, th, v.run_share, sums.any_graph_replayed);
  v.signals = e.List();
  v.host_per_step = {c.schedule / c.steps, c.prepare / c.steps,     c.postprocess / c.steps,
                     c.loop_gap / c.steps, sums.hidden_host_us > 0, ctx.backend == "cuda"};
  v.tensor_parallel = TensorParallel(c, p, cal, ctx);
  Decide(c, e, &v);
  NameHeadroom(sums, p, cal, th, &v);
  // Writing: the class's sentence, headroom or contention, and the window's note.
  v.summary = ClassSentence(c, e, p, ctx, th, v) + HeadroomSentence(v, th);
  if (v.tensor_parallel.ranks > 1 && v.step_bound != Bottleneck::kCommunicationBound) {
    v.summary += TensorParallelSentence(v.tensor_parallel);
  }
  v.window_note = WindowNote(steps, sums, p, ctx, th);
  if (!v.window_note.empty() && sums.steps < th.min_window_steps) {
    absl::StrAppend(&v.summary, " (", v.window_note, ")");
  }
  return v;
}

}  // namespace saturn
