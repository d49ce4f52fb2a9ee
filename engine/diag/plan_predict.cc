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

}  // namespace

// All at the plan's context (pred.context: the mix's steady state where the mix is known):
// window decode points were timed at the window's context, probed ones at the probe's, and
// each is moved to the plan's (MoveDecodeToContext).
StepCurve MeasuredCurve(const std::vector<StepRecord>& steps, const Predictor& pred,
                        double window_context, const AnalyzerContext& ctx, Plan* plan) {
  StepCurve curve = CurveFromSteps(steps);
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
