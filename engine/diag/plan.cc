// The saturation plan: ordered actions with predicted tokens/s and TPOT from the fitted step
// model (step_model.h) and the shape cost model (step_cost.h), bounded by the scheduler's
// state: KV capacity, configured limits, queue demand, an optional TPOT objective.
// docs/DIAGNOSTICS.md, "Plan", explains each rule.
#include <algorithm>
#include <cmath>

#include "absl/strings/str_format.h"
#include "engine/diag/analyzer.h"
#include "engine/diag/step_curve.h"

namespace saturn {
namespace {

// Per captured node overhead with graphs: NVIDIA "Getting Started with CUDA Graphs",
// 3.4 us per 2.9 us kernel replayed from a graph.
constexpr double kGraphNodeUs = 0.5;
// Graph memory per captured size when the backend does not say (TensorRT-LLM PR #12895).
constexpr double kGraphBytesPerSize = 10.0 * (1 << 20);

struct Predictor {
  const StepModel& model;
  const AnalyzerContext& ctx;
  double context;
  double host_phases_us;  // mean measured schedule + prepare + postprocess
  bool graphs_now;

  int Padded(int b, bool graphs) const {
    if (!graphs) return b;
    for (int s : ctx.graph_sizes) {
      if (s >= b) return s;
    }
    return b;  // larger than every captured size: runs eagerly
  }
  // Decode step time at batch b.
  double DecodeUs(int b, bool graphs) const {
    const int rows = Padded(b, graphs);
    const StepCost cost = EstimateStepCost(ctx.model, ctx.dtype_bytes, DecodeShape(rows, context),
                                           ctx.weight_dtype_bytes);
    double t = model.PredictUs(cost, b);
    if (graphs && !graphs_now) {
      int ops = 0;
      for (const ClassCost& c : cost) ops += c.ops;
      const double removable =
          std::max(0.0, t - model.DeviceUs(cost) - host_phases_us) + ops * model.op_overhead_us;
      t -= std::min(removable, ops * std::max(0.0, model.dispatch_us - kGraphNodeUs));
    }
    return std::max(t, 1e-3);
  }
  double DecodeTps(int b, bool graphs) const { return b / DecodeUs(b, graphs) * 1e6; }
  // A step of `budget` prefill tokens (one chunk) next to `decodes` decode rows.
  double MixedUs(int budget, int decodes) const {
    const StepShape s = MixedShape(1, std::max(1, budget - decodes), 0, decodes, context, true);
    return model.PredictUs(EstimateStepCost(ctx.model, ctx.dtype_bytes, s, ctx.weight_dtype_bytes),
                           decodes + 1);
  }
};

// Step time from the window's measured curve inside its range; outside it the fitted model,
// scaled to agree with the curve at the nearest measured point, flagged, with the wider error
// Interpolate gives for that distance.
struct CurveLookupFn {
  const Predictor& pred;
  const StepCurve& curve;
  bool graphs;
  double ModelUs(double rows, bool prefill) const {
    return prefill ? pred.MixedUs(std::max(1, int(std::lround(rows))), 0)
                   : pred.DecodeUs(std::max(1, int(std::lround(rows))), graphs);
  }
  CurveLookup operator()(double rows, bool prefill) const {
    // The curve was measured with the graph setting in force; another setting is the model's.
    static const std::vector<CurvePoint> kNone;
    const std::vector<CurvePoint>& pts =
        graphs != pred.graphs_now ? kNone : prefill ? curve.prefill : curve.decode;
    CurveLookup l = Interpolate(pts, rows);
    if (l.in_range) return l;
    const double model = ModelUs(rows, prefill);
    if (pts.empty()) {
      l.us = model;
      l.rel_error = std::max(pred.model.fit_error, 0.0) + 0.25;
      return l;
    }
    const CurvePoint& edge = rows < pts.front().x ? pts.front() : pts.back();
    const double at_edge = ModelUs(edge.x, prefill);
    l.us = at_edge > 0 ? model * edge.us / at_edge : model;
    return l;
  }
};

// The window's own curve, extended by the probed one when it was measured with the graph
// setting in force. Probed decode points were timed at the probe's context: each is moved to
// the window's context by the fitted model's ratio at that batch (attention grows with it).
StepCurve MeasuredCurve(const std::vector<StepRecord>& steps, const Predictor& pred,
                        const AnalyzerContext& ctx, Plan* plan) {
  StepCurve curve = CurveFromSteps(steps);
  const bool have_probe = !ctx.probe_curve.decode.empty() || !ctx.probe_curve.prefill.empty();
  if (have_probe && ctx.probe_graphs == pred.graphs_now) {
    StepCurve probe = ctx.probe_curve;
    Predictor at_probe = pred;
    at_probe.context = ctx.probe_context > 0 ? ctx.probe_context : pred.context;
    for (CurvePoint& p : probe.decode) {
      const int b = std::max(1, int(std::lround(p.x)));
      const double there = at_probe.DecodeUs(b, pred.graphs_now);
      if (there > 0) p.us *= pred.DecodeUs(b, pred.graphs_now) / there;
    }
    curve = MergeCurves(curve, probe);
    plan->used_probe = true;
  }
  MakeMonotone(&curve.decode);
  MakeMonotone(&curve.prefill);
  plan->curve = curve;
  if (!curve.decode.empty()) plan->measured_max_batch = curve.decode.back().x;
  if (!curve.prefill.empty()) plan->measured_max_prefill_rows = curve.prefill.back().x;
  return curve;
}

FailureMode Fm(std::string name, double at, std::string detail) {
  return FailureMode{std::move(name), at, std::move(detail)};
}

}  // namespace

const char* ActionKindName(ActionKind k) {
  switch (k) {
    case ActionKind::kEnableCudaGraphs:
      return "enable_cuda_graphs";
    case ActionKind::kRaiseMaxNumSeqs:
      return "raise_max_num_seqs";
    case ActionKind::kRaiseMaxNumBatchedTokens:
      return "raise_max_num_batched_tokens";
    case ActionKind::kRaiseClientConcurrency:
      return "raise_client_concurrency";
  }
  return "?";
}

Plan MakePlan(const std::vector<StepRecord>& steps, const Profile& p, const Verdict& v,
              const StepModel& model, const Calibration& cal, const AnalyzerContext& ctx,
              const AnalyzerThresholds& th) {
  (void)cal;
  Plan plan;
  if (steps.empty() || ctx.model.num_layers == 0) {
    plan.note = "no steps in the window: send requests to get a plan";
    return plan;
  }
  // Where the server is now.
  double dec_seqs = 0, dec_steps = 0, host = 0, demand = 0;
  int prefill_steps = 0, budget_hits = 0;
  for (const StepRecord& r : steps) {
    host += r.schedule_us + r.prepare_us + r.postprocess_us;
    demand = std::max(demand, double(r.num_running + r.queue_depth));
    if (r.num_prefill_tokens == 0 && r.num_decode_tokens > 0) dec_seqs += r.num_seqs, ++dec_steps;
    if (r.num_prefill_tokens > 0) {
      ++prefill_steps;
      if (r.num_prefill_tokens + r.num_decode_tokens >= r.options.max_num_batched_tokens) {
        ++budget_hits;
      }
    }
  }
  demand = std::max(demand, double(ctx.num_running + ctx.num_waiting));
  const int b_now =
      std::max(1, int(std::lround(dec_steps > 0 ? dec_seqs / dec_steps : p.mean_batch_seqs)));
  plan.batch_now = b_now;
  plan.context = p.mean_context > 0 ? p.mean_context : 1.0;
  plan.expected_seq_len =
      ctx.mean_request_tokens > 0 ? ctx.mean_request_tokens : 2.0 * plan.context;
  if (ctx.max_model_len > 0) {
    plan.expected_seq_len = std::min(plan.expected_seq_len, double(ctx.max_model_len));
  }
  const int block = std::max(1, ctx.kv_block_size);
  const int blocks_per_seq = std::max(1, int(std::ceil(plan.expected_seq_len / block)));
  plan.kv_capacity_batch = ctx.kv_num_blocks > 0 ? ctx.kv_num_blocks / blocks_per_seq : 1 << 20;
  const Predictor pred{model, ctx, plan.context, host / steps.size(), ctx.options.cuda_graphs};
  const StepCurve curve = MeasuredCurve(steps, pred, ctx, &plan);
  // The request mix: the engine's finished requests, else the window's prefill/decode ratio
  // with the mean request length. Without prefill in the window, decode-only predictions.
  double win_prefill = 0, win_decode = 0;
  for (const StepRecord& r : steps) win_prefill += r.num_prefill_tokens, win_decode += r.num_decode_tokens;
  WorkloadMix mix{ctx.mean_prompt_tokens, ctx.mean_output_tokens};
  if (mix.prompt_tokens > 0 && win_prefill > 0 && win_decode > 0) {
    // Output length from the window's own token ratio rho = P / (O - 1): finished requests
    // favour the short ones that finish first (a window after a start or a change).
    mix.output_tokens = 1 + mix.prompt_tokens * win_decode / win_prefill;
  } else if ((mix.prompt_tokens <= 0 || mix.output_tokens <= 0) && win_prefill > 0 && win_decode > 0 &&
      ctx.mean_request_tokens > 0) {
    const double rho = win_prefill / win_decode;  // = P / (O - 1)
    mix.output_tokens = (ctx.mean_request_tokens + rho) / (1 + rho);
    mix.prompt_tokens = ctx.mean_request_tokens - mix.output_tokens;
  }
  const bool use_mix = win_prefill > 0 && mix.prompt_tokens > 0 && mix.output_tokens > 0;
  const int budget_now = std::max(1, ctx.options.max_num_batched_tokens);

  // Throughput plateau over every batch the server could be configured to, and B90.
  const int limit = std::max({ctx.max_num_seqs_limit, ctx.options.max_num_seqs, b_now});
  bool graphs = ctx.options.cuda_graphs;
  const bool add_graphs = ctx.supports_graphs && !graphs &&
                          (v.step_bound == Bottleneck::kLaunchBound ||
                           std::any_of(v.signals.begin(), v.signals.end(), [](const Signal& s) {
                             return s.name == "launch_share" && s.crossed;
                           }));
  if (add_graphs) graphs = true;
  // Attention grows with the batch too, so take the best over the range, not its end.
  for (int b = 1; b <= limit; ++b) {
    plan.plateau_tokens_per_s = std::max(plan.plateau_tokens_per_s, pred.DecodeTps(b, graphs));
  }
  plan.plateau_batch = limit;
  for (int b = 1; b <= limit; ++b) {
    if (pred.DecodeTps(b, graphs) >= th.plateau_fraction * plan.plateau_tokens_per_s) {
      plan.plateau_batch = b;
      break;
    }
  }
  int target = std::min({plan.plateau_batch, plan.kv_capacity_batch, limit});
  target = std::max(target, 1);
  int slo_batch = 1 << 20;
  if (ctx.tpot_slo_ms > 0) {
    slo_batch = 0;
    for (int b = 1; b <= limit; ++b) {
      if (pred.DecodeUs(b, graphs) * 1e-3 <= ctx.tpot_slo_ms) slo_batch = b;
    }
    target = std::max(1, std::min(target, slo_batch));
  }
  // Failure modes that bound the batch, shared by the batching actions.
  std::vector<FailureMode> bounds;
  if (plan.kv_capacity_batch < plan.plateau_batch) {
    bounds.push_back(Fm("kv_preemption", plan.kv_capacity_batch,
                        absl::StrFormat("the KV cache (%d blocks of %d tokens) holds %d sequences "
                                        "of %.0f tokens; past batch %d requests are preempted and "
                                        "recomputed",
                                        ctx.kv_num_blocks, block, plan.kv_capacity_batch,
                                        plan.expected_seq_len, plan.kv_capacity_batch)));
  }
  if (limit < plan.plateau_batch || (limit == plan.plateau_batch && limit > b_now)) {
    bounds.push_back(Fm("configured_limit", limit,
                        absl::StrFormat("max_num_seqs_limit is %d", ctx.max_num_seqs_limit)));
  }
  if (slo_batch < std::min(plan.plateau_batch, plan.kv_capacity_batch)) {
    bounds.push_back(Fm("tpot_slo", slo_batch,
                        absl::StrFormat("TPOT objective %.1f ms holds up to batch %d",
                                        ctx.tpot_slo_ms, slo_batch)));
  }

  EngineOptions opts = ctx.options;
  bool demand_bound = false;  // the max_num_seqs action stopped at what the queue supports
  double cur_batch = b_now;
  bool cur_graphs = ctx.options.cuda_graphs;
  // Workload-aware prediction of an action: closed-loop output tokens/s at `conc_before` ->
  // `conc_after` in-flight requests, max_num_seqs `seqs_before` -> `seqs_after`.
  auto fill_mix = [&](Action* a, double conc_before, int seqs_before, double conc_after,
                      int seqs_after, bool graphs_after) {
    if (!use_mix) return;
    const MixPrediction before = PredictMix(CurveLookupFn{pred, curve, cur_graphs}, mix,
                                            conc_before, seqs_before, budget_now);
    const MixPrediction after = PredictMix(CurveLookupFn{pred, curve, graphs_after}, mix,
                                           conc_after, seqs_after, budget_now);
    a->tokens_per_s_before = before.output_tokens_per_s;
    a->tpot_ms_before = before.tpot_ms;
    a->tokens_per_s_after = after.output_tokens_per_s;
    a->tpot_ms_after = after.tpot_ms;
    a->batch_after = after.decode_batch;
    a->prefill_share = after.prefill_share;
    a->outside_measured = !after.in_range;
    a->expected_error = std::max(after.rel_error, model.fit_error);
    a->tradeoffs.push_back(Fm(
        "workload_mix", after.prefill_share,
        absl::StrFormat("requests of %.0f prompt + %.0f output tokens: %.0f%% of step time in "
                        "steps carrying prefill, decode batch %.1f of %.0f in flight; expected "
                        "error %.0f%%%s",
                        mix.prompt_tokens, mix.output_tokens, 100 * after.prefill_share,
                        after.decode_batch, std::min<double>(conc_after, seqs_after),
                        100 * a->expected_error,
                        after.in_range ? "" : " (outside the measured step shapes)")));
  };
  auto fill = [&](Action* a, double batch_after, bool graphs_after) {
    // Decode steps: the measured curve where it reaches, the model (scaled to it) beyond.
    const CurveLookup l0 = CurveLookupFn{pred, curve, cur_graphs}(cur_batch, false);
    const CurveLookup l = CurveLookupFn{pred, curve, graphs_after}(batch_after, false);
    a->batch_after = batch_after;
    a->tpot_ms_before = l0.us * 1e-3;
    a->tokens_per_s_before = cur_batch / l0.us * 1e6;
    a->tpot_ms_after = l.us * 1e-3;
    a->tokens_per_s_after = batch_after / l.us * 1e6;
    a->expected_error = std::max(l.rel_error, model.fit_error);
    a->outside_measured = !l.in_range;
    const double dt = a->tpot_ms_after / std::max(a->tpot_ms_before, 1e-9) - 1;
    a->tradeoffs.push_back(Fm("latency", a->tpot_ms_after,
                              absl::StrFormat("TPOT/ITL %.2f -> %.2f ms (%+.0f%%)",
                                              a->tpot_ms_before, a->tpot_ms_after, 100 * dt)));
  };

  if (add_graphs) {
    Action a;
    a.kind = ActionKind::kEnableCudaGraphs;
    a.what = "enable CUDA graphs (decode steps replay one graph instead of launching each op)";
    fill(&a, cur_batch, true);
    const double mem = ctx.graph_memory_bytes > 0
                           ? ctx.graph_memory_bytes
                           : kGraphBytesPerSize * double(ctx.graph_sizes.size());
    a.tradeoffs.push_back(Fm("graph_memory", mem,
                             absl::StrFormat("%.0f MiB for %zu captured sizes%s; capture time "
                                             "grows with the number of sizes",
                                             mem / (1 << 20), ctx.graph_sizes.size(),
                                             ctx.graph_memory_bytes > 0 ? "" : " (estimated)")));
    const int padded = pred.Padded(int(cur_batch), true);
    a.tradeoffs.push_back(Fm("padding_waste", padded - cur_batch,
                             absl::StrFormat("batch %.0f pads to %d rows (%.0f%% waste)", cur_batch,
                                             padded, 100.0 * (padded - cur_batch) / padded)));
    opts.cuda_graphs = true;
    a.options_after = opts;
    cur_graphs = true;
    plan.actions.push_back(a);
  }

  const bool queue_binds = p.max_queue_depth > 0 || b_now >= 0.95 * ctx.options.max_num_seqs;
  if (queue_binds && target > ctx.options.max_num_seqs) {
    const double reach = std::min<double>(target, std::max<double>(demand, b_now));
    if (pred.DecodeTps(int(reach), cur_graphs) >=
        th.min_gain * pred.DecodeTps(int(cur_batch), cur_graphs)) {
      Action a;
      a.kind = ActionKind::kRaiseMaxNumSeqs;
      a.from = ctx.options.max_num_seqs;
      a.to = target;
      a.what = absl::StrFormat("raise max_num_seqs %d -> %d", ctx.options.max_num_seqs, target);
      fill(&a, reach, cur_graphs);
      fill_mix(&a, demand, ctx.options.max_num_seqs, demand, target, cur_graphs);
      a.tradeoffs.insert(a.tradeoffs.end(), bounds.begin(), bounds.end());
      if (reach < target) {
        demand_bound = true;
        a.tradeoffs.push_back(Fm("queue_demand", reach,
                                 absl::StrFormat("only %.0f requests are in flight: the batch "
                                                 "stops at %.0f until clients send more",
                                                 demand, reach)));
      }
      opts.max_num_seqs = target;
      a.options_after = opts;
      cur_batch = reach;
      plan.actions.push_back(a);
    } else if (reach < target) {
      demand_bound = true;  // the limit binds only because clients send no more: ask them
    }
  }

  if (prefill_steps > 0 && p.max_queue_depth > 0 &&
      budget_hits >= th.budget_hit_share * prefill_steps) {
    const int tlimit = std::max(ctx.max_num_batched_tokens_limit, opts.max_num_batched_tokens);
    const int decodes = int(cur_batch);
    auto tps = [&](int t) { return t / pred.MixedUs(t, decodes) * 1e6; };
    double plateau = 0;  // prefill attention is quadratic in the chunk: best, not the end
    for (int t = 64; t <= tlimit; t += 64) plateau = std::max(plateau, tps(t));
    int t_target = tlimit;
    for (int t = 64; t <= tlimit; t += 64) {
      if (tps(t) >= th.plateau_fraction * plateau) {
        t_target = t;
        break;
      }
    }
    if (t_target > opts.max_num_batched_tokens) {
      Action a;
      a.kind = ActionKind::kRaiseMaxNumBatchedTokens;
      a.from = opts.max_num_batched_tokens;
      a.to = t_target;
      a.what = absl::StrFormat("raise max_num_batched_tokens %d -> %d", opts.max_num_batched_tokens,
                               t_target);
      a.batch_after = cur_batch;
      a.tokens_per_s_before = tps(opts.max_num_batched_tokens);
      a.tokens_per_s_after = tps(t_target);
      a.tpot_ms_before = pred.MixedUs(opts.max_num_batched_tokens, decodes) * 1e-3;
      a.tpot_ms_after = pred.MixedUs(t_target, decodes) * 1e-3;
      a.tradeoffs.push_back(Fm("latency", a.tpot_ms_after,
                               absl::StrFormat("decodes sharing a prefill step see ITL %.1f -> "
                                               "%.1f ms",
                                               a.tpot_ms_before, a.tpot_ms_after)));
      opts.max_num_batched_tokens = t_target;
      a.options_after = opts;
      plan.actions.push_back(a);
    }
  }

  if ((v.bottleneck == Bottleneck::kUnderloaded || demand_bound) && target > cur_batch &&
      v.step_bound != Bottleneck::kComputeBound) {
    Action a;
    a.kind = ActionKind::kRaiseClientConcurrency;
    a.from = demand;
    a.to = target;
    a.what = absl::StrFormat(
        "raise client concurrency %.0f -> %d in-flight requests%s", demand, target,
        opts.max_num_seqs < target
            ? absl::StrFormat(" (and max_num_seqs %d -> %d)", opts.max_num_seqs, target)
            : "");
    fill(&a, target, cur_graphs);
    fill_mix(&a, demand, opts.max_num_seqs, target, std::max(opts.max_num_seqs, target),
             cur_graphs);
    if (p.output_tokens_per_s > 0) {  // what the window delivered, idle included
      a.tokens_per_s_before = std::min(a.tokens_per_s_before, p.output_tokens_per_s);
    }
    a.tradeoffs.insert(a.tradeoffs.end(), bounds.begin(), bounds.end());
    if (opts.max_num_seqs < target) opts.max_num_seqs = target;
    a.options_after = opts;
    plan.actions.push_back(a);
  }
  if (plan.actions.empty()) {
    if (v.far_below_roofs && !v.headroom.empty()) {
      const Headroom& h = v.headroom.front();
      plan.note = absl::StrFormat(
          "no batching change predicted to gain throughput, but the steps run far below both "
          "roofs (%.0f%% of peak FLOP/s, %.0f%% of bandwidth): %s takes %.0f%% of the step at "
          "%.0f%% of its roof; a faster %s kernel would give up to %.2fx tokens/s",
          100 * v.step_mfu, 100 * v.step_mbu, OpClassName(h.op_class), 100 * h.step_share,
          100 * h.roofline_efficiency, OpClassName(h.op_class), h.speedup);
    } else if (v.step_bound == Bottleneck::kComputeBound && !v.far_below_roofs) {
      plan.note = absl::StrFormat(
          "at the compute ceiling (steps at %.0f%% of peak FLOP/s): more batching adds "
          "latency, not throughput; batch %d already gives %.0f%% of the plateau",
          100 * v.step_mfu, plan.plateau_batch, 100 * th.plateau_fraction);
    } else {
      plan.note = "no change predicted to gain throughput";
    }
  }
  return plan;
}

}  // namespace saturn
