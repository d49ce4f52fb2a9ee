// The plan's measured step-time curve (plan_predict.h).
#include "engine/diag/plan_predict.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace saturn {
namespace {

// Decode points timed at `from_context` moved to pred's context: where the probe timed decode
// steps at two contexts, by that measured slope per context token (attention's
// reads and the KV's share of the caches, which the roofline model underrates on a CPU with a
// large last-level cache); else by the fitted model's ratio at that batch.
void MoveDecodeToContext(const Predictor& pred, double from_context,
                         std::vector<CurvePoint>* points) {
  const std::vector<CurvePoint>& slopes = pred.ctx.probe_context_slopes;
  Predictor there = pred;
  there.context = from_context;
  for (CurvePoint& p : *points) {
    if (!slopes.empty()) {
      const double moved = p.us + ContextSlopeAt(slopes, p.x) * (pred.context - from_context);
      p.us = std::max(moved, 0.1 * p.us);
      continue;
    }
    const int b = std::max(1, int(std::lround(p.x)));
    const double us = there.DecodeUs(b, pred.graphs_now);
    if (us > 0) p.us *= pred.DecodeUs(b, pred.graphs_now) / us;
  }
}

// Per-row work the probe's synthetic steps leave out: they sample greedily (an argmax), while
// the window's requests may sample at a temperature (a softmax over the vocabulary and a walk
// down it per row: 0.7 ms a row on `small` at temperature 1 on a 2-core Xeon, 31 of a 54 ms
// step at batch 46). That cost grows with the rows, so carrying it to other batches as the
// window's ratio to the probe (MergeCurves) put batch 46 at 43.7 ms where 53.9 was measured.
// Per row at the window's batch: the window's decode steps over the probe's at that batch, at
// most what the window's sampling ops took a row beyond the probe's greedy rows (0 where the
// window was no slower, sampled greedily, or the probe's sampling was not timed). Rows are
// spread over the backend's threads, so a row's share of the wall time falls as the batch
// grows (1.7 ms a row at batch 1, 0.7 at 26 on two threads); the probe's greedy rows fall
// alike, and carry it to other batches (SamplingGapUs).
struct SamplingGap {
  double per_row_us = 0;  // at batch `at`
  double at = 0;
};
SamplingGap WindowSamplingGap(const std::vector<StepRecord>& steps, const StepCurve& window,
                              const std::vector<CurvePoint>& probe, const Predictor& pred) {
  const std::vector<CurvePoint>& greedy = pred.ctx.probe_sampling;
  double sampling_us = 0, rows = 0, steps_n = 0;
  for (const StepRecord& r : steps) {
    if (!r.per_op_timed || r.num_prefill_tokens > 0 || r.num_sampled <= 0) continue;
    sampling_us += r.by_class[static_cast<size_t>(OpClass::kSampling)].device_us;
    rows += r.num_sampled;
    ++steps_n;
  }
  if (rows <= 0 || greedy.empty()) return {};
  const double at = rows / steps_n;
  const double extra = sampling_us / rows - Interpolate(greedy, at).us;
  if (!(extra > 0)) return {};
  double gap = 0, weight = 0;
  for (const CurvePoint& w : window.decode) {
    const CurveLookup p = Interpolate(probe, w.x);
    if (!p.in_range || !(w.x > 0)) continue;
    gap += std::max(1, w.samples) * (w.us - p.us) / w.x;
    weight += std::max(1, w.samples);
  }
  return weight > 0 ? SamplingGap{std::clamp(gap / weight, 0.0, extra), at} : SamplingGap{};
}

// The gap's microseconds in a step of `rows` rows.
double SamplingGapUs(const SamplingGap& g, const std::vector<CurvePoint>& greedy, double rows) {
  if (!(g.per_row_us > 0)) return 0;
  const double at = Interpolate(greedy, g.at).us, there = Interpolate(greedy, rows).us;
  return g.per_row_us * rows * (at > 0 && there > 0 ? there / at : 1);
}

}  // namespace

// All at the plan's context (pred.context: the mix's steady state where the mix is known):
// window decode points were timed at the window's context, probed ones at the probe's, and
// each is moved to the plan's (MoveDecodeToContext).
StepCurve MeasuredCurve(const std::vector<StepRecord>& steps, const Predictor& pred,
                        double window_context, const AnalyzerContext& ctx, Plan* plan) {
  StepCurve curve = CurveFromSteps(steps);
  plan->step_drift = WindowDrift(steps);
  // The window's steps ran at its own context; the plan's is the mix's steady state.
  MoveDecodeToContext(pred, window_context, &curve.decode);
  MoveDecodeToContext(pred, window_context, &curve.decode_after_prefill);
  Predictor at_window = pred;
  at_window.context = window_context;
  // The window's mixed steps moved to pure prefill chunks of the same rows (CurveLookupFn
  // moves them back to the mix asked for): the probe's chunks and the plan's mix then compare
  // like with like (measured: with 24 decodes in a 107-row step it took 1.2x the time it took
  // with 4).
  for (CurvePoint& p : curve.prefill) {
    if (p.decode_rows >= 0.5) p.us /= at_window.MixRatio(p.x, p.decode_rows);
    p.decode_rows = 0;
  }
  const bool have_probe = !ctx.probe_curve.decode.empty() || !ctx.probe_curve.prefill.empty();
  if (have_probe && ctx.probe_graphs == pred.graphs_now) {
    StepCurve probe = ctx.probe_curve;
    const double probe_context = ctx.probe_context > 0 ? ctx.probe_context : pred.context;
    MoveDecodeToContext(pred, probe_context, &probe.decode);
    MoveDecodeToContext(pred, probe_context, &probe.decode_after_prefill);
    const SamplingGap gap = WindowSamplingGap(steps, curve, probe.decode, pred);
    for (std::vector<CurvePoint>* pts : {&probe.decode, &probe.decode_after_prefill}) {
      for (CurvePoint& q : *pts) q.us += SamplingGapUs(gap, ctx.probe_sampling, q.x);
    }
    plan->sampling_gap_us_per_row = gap.per_row_us;
    curve = MergeCurves(curve, probe);
    plan->used_probe = true;
  }
  MakeMonotone(&curve.decode);
  MakeMonotone(&curve.decode_after_prefill);
  MakeMonotone(&curve.prefill);
  plan->curve = curve;
  if (!curve.decode.empty()) plan->measured_max_batch = curve.decode.back().x;
  if (!curve.prefill.empty()) plan->measured_max_prefill_rows = curve.prefill.back().x;
  return curve;
}

}  // namespace saturn
