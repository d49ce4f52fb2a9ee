// The plan's step-time predictions (plan.cc): the fitted step model at any batch and mix
// (Predictor), the window's and the probe's measured curves at the plan's context, and the
// lookup that prefers the measured curve and scales the model to it beyond (CurveLookupFn).
// Internal to engine/diag/.
#pragma once

#include <optional>
#include <vector>

#include "engine/diag/analyzer.h"
#include "engine/diag/step_curve.h"

namespace saturn {

// Per captured node overhead with graphs: NVIDIA "Getting Started with CUDA Graphs",
// 3.4 us per 2.9 us kernel replayed from a graph.
inline constexpr double kGraphNodeUs = 0.5;
struct Predictor {
  const StepModel& model;
  const AnalyzerContext& ctx;
  double context;
  double host_phases_us;  // mean measured schedule + prepare + postprocess
  bool graphs_now;

  // The fitted model's time for a step of `shape` holding `num_seqs` sequences.
  double ShapeUs(const StepShape& shape, double num_seqs) const {
    return model.PredictUs(EstimateStepCost(ctx.model, ctx.dtype_bytes, shape,
                                            ctx.weight_dtype_bytes, ctx.kv_dtype_bytes),
                           num_seqs);
  }
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
                                           ctx.weight_dtype_bytes, ctx.kv_dtype_bytes);
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
  // A step of `budget` rows: one prefill chunk next to `decodes` decode rows.
  double MixedUs(int budget, int decodes) const {
    return ShapeUs(MixedShape(1, std::max(1, budget - decodes), 0, decodes, context, true),
                   decodes + 1);
  }
  // A step of `rows` rows, `decode_rows` of them decodes, over one of pure prefill.
  double MixRatio(double rows, double decode_rows) const {
    const int r = std::max(1, int(std::lround(rows)));
    const int d = std::clamp(int(std::lround(decode_rows)), 0, r - 1);
    const double pure = MixedUs(r, 0);
    return pure > 0 ? MixedUs(r, d) / pure : 1;
  }
};

// Step time from the window's measured curve inside its range; outside it the fitted model,
// scaled to agree with the curve at the nearest measured point, flagged, with the wider error
// Interpolate gives for that distance. The curve's prefill points stand for pure prefill
// chunks (MeasuredCurve moves the window's mixed steps there); a step whose chunk shares it
// with `decode_rows` decodes costs the cost model's ratio more (a decode row attends over its
// whole context and takes a logits row). Decode steps that follow a prefill step are looked
// up on their own curve where one was measured (step_probe.h: they run slower).
struct CurveLookupFn {
  const Predictor& pred;
  const StepCurve& curve;
  bool graphs;
  double ModelUs(double rows, bool prefill) const {
    return prefill ? pred.MixedUs(std::max(1, int(std::lround(rows))), 0)
                   : pred.DecodeUs(std::max(1, int(std::lround(rows))), graphs);
  }
  CurveLookup operator()(double rows, double decode_rows, bool prefill,
                         double after_prefill) const {
    if (prefill) {
      CurveLookup l = PureLookup(rows, curve.prefill, true);
      if (decode_rows >= 0.5) l.us *= pred.MixRatio(rows, decode_rows);
      return l;
    }
    // Decode steps: back to back, and the share that follows a prefill step from that curve.
    CurveLookup l = PureLookup(rows, curve.decode, false);
    if (after_prefill > 0 && !curve.decode_after_prefill.empty()) {
      const CurveLookup a = PureLookup(rows, curve.decode_after_prefill, false);
      l.us = (1 - after_prefill) * l.us + after_prefill * a.us;
      l.rel_error = (1 - after_prefill) * l.rel_error + after_prefill * a.rel_error;
      l.in_range = l.in_range && a.in_range;
    }
    return l;
  }
  CurveLookup PureLookup(double rows, const std::vector<CurvePoint>& measured, bool prefill) const {
    if (!prefill && graphs != pred.graphs_now) {
      if (const std::optional<CurveLookup> o = OtherGraphs(rows, measured); o.has_value()) {
        return *o;
      }
    }
    // The curve was measured with the graph setting in force; another setting is the model's.
    static const std::vector<CurvePoint> kNone;
    const std::vector<CurvePoint>& pts = graphs != pred.graphs_now ? kNone : measured;
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
  // A decode step with the graph setting not in force, where the probe timed both settings:
  // the curve's step (the setting in force) times the probe's ratio of the two at that batch.
  std::optional<CurveLookup> OtherGraphs(double rows,
                                         const std::vector<CurvePoint>& measured) const {
    const AnalyzerContext& ctx = pred.ctx;
    const std::vector<CurvePoint>& other = ctx.probe_curve_other_graphs.decode;
    const std::vector<CurvePoint>& own = ctx.probe_curve.decode;
    if (other.empty() || own.empty() || ctx.probe_graphs != pred.graphs_now) return std::nullopt;
    const CurveLookup o = Interpolate(other, rows), m = Interpolate(own, rows);
    if (!(o.us > 0 && m.us > 0)) return std::nullopt;
    CurveLookup l = CurveLookupFn{pred, curve, pred.graphs_now}.PureLookup(rows, measured, false);
    l.us *= o.us / m.us;
    l.rel_error += o.rel_error + m.rel_error;
    l.in_range = l.in_range && o.in_range && m.in_range;
    return l;
  }
};

// The window's own curve, extended by the probe's where it was measured with the graph setting
// in force, at pred's context; records on `plan` what it used (curve, probe, measured range).
StepCurve MeasuredCurve(const std::vector<StepRecord>& steps, const Predictor& pred,
                        double window_context, const AnalyzerContext& ctx, Plan* plan);

}  // namespace saturn
