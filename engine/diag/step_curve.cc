// The measured step-time curve (interpolation, out-of-range flagging, building it from a
// window's steps) and the workload-aware closed-loop throughput model. See step_curve.h.
#include "engine/diag/step_curve.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <utility>

#include "engine/measure/line_fit.h"

namespace saturn {
namespace {

// Expected error inside the measured range beyond the points' own spread (linear
// interpolation between neighbours of a convex-ish curve).
constexpr double kInterpolationError = 0.02;
// Extra expected error per doubling of x beyond the measured range.
constexpr double kErrorPerDoubling = 0.25;
// Extra expected error of the mix model when prefill shares the steps (chunk placement and
// arrival order are averaged, not simulated).
constexpr double kMixModelError = 0.03;

double Quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  const double pos = q * (v.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (pos - lo) * (v[hi] - v[lo]);
}

CurvePoint PointOf(const std::vector<double>& xs, const std::vector<double>& us) {
  CurvePoint p;
  p.x = Quantile(xs, 0.5);
  p.us = Quantile(us, 0.5);
  p.spread = p.us > 0 ? (Quantile(us, 0.9) - Quantile(us, 0.1)) / p.us : 0;
  p.samples = static_cast<int>(us.size());
  return p;
}

double Mean(const std::vector<double>& v) {
  double sum = 0;
  for (double u : v) sum += u;
  return v.empty() ? 0 : sum / v.size();
}

// Twice the standard error of the mean of `us` (steps in the order they ran) over its mean.
// Neighbouring steps share their load (a stall, another process's burst), so the count is the
// effective one of a first-order autoregressive series, n (1 - r) / (1 + r) with r the lag-1
// autocorrelation (not below 0, at most 0.9). One sample: its own spread is unknown, 1.
double MeanError(const std::vector<double>& us) {
  const size_t n = us.size();
  const double mean = Mean(us);
  if (n < 2 || !(mean > 0)) return 1;
  double var = 0, lag = 0;
  for (size_t i = 0; i < n; ++i) {
    var += (us[i] - mean) * (us[i] - mean);
    if (i > 0) lag += (us[i] - mean) * (us[i - 1] - mean);
  }
  if (!(var > 0)) return 0;
  const double r = std::clamp(lag / var, 0.0, 0.9);
  const double n_eff = std::max(1.0, n * (1 - r) / (1 + r));
  return 2 * std::sqrt(var / (n - 1) / n_eff) / mean;
}

}  // namespace

CurveLookup Interpolate(const std::vector<CurvePoint>& pts, double x) {
  CurveLookup out;
  if (pts.empty()) {
    out.rel_error = 1;
    return out;
  }
  if (pts.size() == 1) {
    out.us = pts[0].us;
    out.in_range = std::abs(x - pts[0].x) <= 1e-9 * std::max(1.0, x);
    const double ratio = std::max(x, pts[0].x) / std::max(std::min(x, pts[0].x), 1e-9);
    out.rel_error = pts[0].error + kInterpolationError +
                    (out.in_range ? 0 : kErrorPerDoubling * std::log2(ratio));
    return out;
  }
  size_t i = 1;  // segment [i-1, i]
  while (i + 1 < pts.size() && pts[i].x < x) ++i;
  const CurvePoint& a = pts[i - 1];
  const CurvePoint& b = pts[i];
  double slope = (b.us - a.us) / std::max(b.x - a.x, 1e-9);
  out.in_range = x >= pts.front().x && x <= pts.back().x;
  if (!out.in_range) slope = std::max(slope, 0.0);  // never extrapolate a step time downwards
  out.us = std::max(a.us + slope * (x - a.x), 1e-3);
  out.rel_error = std::max(a.error, b.error) + kInterpolationError;
  if (!out.in_range) {
    const double edge = x < pts.front().x ? pts.front().x : pts.back().x;
    const double ratio = std::max(x, edge) / std::max(std::min(x, edge), 1e-9);
    out.rel_error += kErrorPerDoubling * std::log2(ratio);
  }
  return out;
}

StepCurve CurveFromSteps(const std::vector<StepRecord>& steps, int min_samples) {
  std::map<int, std::pair<std::vector<double>, std::vector<double>>> dec, dec_after, pre;
  std::map<int, double> pre_decode_rows;  // summed per prefill group
  bool prev_prefill = false;              // the step before carried prefill
  for (const StepRecord& r : steps) {
    const double wall = r.wall_us();
    const bool after_prefill = prev_prefill;
    prev_prefill = r.num_prefill_tokens > 0;
    if (wall <= 0) continue;
    if (r.num_prefill_tokens == 0 && r.num_decode_tokens > 0) {
      // By rows: a step verifying proposals runs more rows than sequences, each a decode row.
      auto& g = (after_prefill ? dec_after : dec)[r.num_decode_tokens];
      g.first.push_back(r.num_decode_tokens);
      g.second.push_back(wall);
    } else if (r.num_prefill_tokens > 0) {
      const double rows = r.num_prefill_tokens + r.num_decode_tokens;
      const int key = static_cast<int>(std::lround(4 * std::log2(rows)));  // 2^(1/4) buckets
      auto& g = pre[key];
      g.first.push_back(rows);
      g.second.push_back(wall);
      pre_decode_rows[key] += r.num_decode_tokens;
    }
  }
  // Throughput is tokens over the sum of step times, so a shape's time is the mean of its
  // steps, stalls on a shared machine included (they recur after a change as before it);
  // the median would hide them (measured here: median 26.5 ms, mean 37.3 ms at batch 16).
  auto point = [](const std::vector<double>& xs, const std::vector<double>& us) {
    CurvePoint p = PointOf(xs, us);
    p.us = Mean(us);
    p.error = MeanError(us);
    return p;
  };
  StepCurve c;
  for (const auto& [key, g] : dec) {
    if (static_cast<int>(g.second.size()) >= min_samples)
      c.decode.push_back(point(g.first, g.second));
  }
  for (const auto& [key, g] : dec_after) {
    if (static_cast<int>(g.second.size()) >= min_samples)
      c.decode_after_prefill.push_back(point(g.first, g.second));
  }
  for (const auto& [key, g] : pre) {
    if (static_cast<int>(g.second.size()) < min_samples) continue;
    CurvePoint p = point(g.first, g.second);
    p.decode_rows = pre_decode_rows[key] / g.second.size();
    c.prefill.push_back(p);
  }
  return c;
}

// A probed decode size slower than a larger one by more than this is a stalled measurement.
constexpr double kNoiseOverLarger = 1.3;

StepCurve CurveFromProbe(const StepProbe& probe, int min_samples) {
  StepCurve c;
  // A typical step over the best: each size's median repeat over its best, pooled (median)
  // over the sizes timed more than once.
  std::vector<double> typical;
  for (const ProbeSeries& s : probe.series) {
    if (s.wall_us.size() < 2 || AtLongContext(probe, s)) continue;
    const double best = *std::min_element(s.wall_us.begin(), s.wall_us.end());
    if (best > 0) typical.push_back(Quantile(s.wall_us, 0.5) / best);
  }
  const double typical_over_best = typical.empty() ? 1.0 : std::max(1.0, Quantile(typical, 0.5));
  // A size's own typical step is not the pooled one: half the ratios' spread, (p90 - p10) / 2
  // over their median, is a point's error (one ratio or none: the point's own spread).
  const double typical_error =
      typical.size() < 2
          ? -1
          : (Quantile(typical, 0.9) - Quantile(typical, 0.1)) / 2 / Quantile(typical, 0.5);
  for (const ProbeSeries& s : probe.series) {
    if (static_cast<int>(s.wall_us.size()) < std::max(1, min_samples)) continue;
    if (AtLongContext(probe, s)) continue;
    const std::vector<double> xs(s.wall_us.size(), double(s.rows));
    CurvePoint p = PointOf(xs, s.wall_us);
    // Best of the repeats (one stalled step must not set a size's time) times the pooled
    // typical/best ratio: served steps are typical steps, not the best of a few (served decode
    // steps ran near the probe's mean, above its best: docs/CPU.md). MergeCurves then scales
    // the probe's shape to the window's steps.
    p.us = *std::min_element(s.wall_us.begin(), s.wall_us.end()) * typical_over_best;
    p.error = typical_error >= 0 ? typical_error : p.spread;
    (s.prefill ? c.prefill : s.after_prefill ? c.decode_after_prefill : c.decode).push_back(p);
  }
  auto by_x = [](const CurvePoint& a, const CurvePoint& b) { return a.x < b.x; };
  std::sort(c.decode.begin(), c.decode.end(), by_x);
  std::sort(c.decode_after_prefill.begin(), c.decode_after_prefill.end(), by_x);
  std::sort(c.prefill.begin(), c.prefill.end(), by_x);
  // A decode size timed 30 % slower than a larger one is noise (more rows never run faster;
  // a tiled GEMM's stair runs the other way): a stalled best of few repeats, dropped. Kept,
  // MakeMonotone spread it over the larger sizes (batch 33 at 64 ms, 18.8 at 32, put batch 86
  // at 66 ms where it ran 36.7). A size timed less slower than a larger one takes the larger
  // one's time: a best of repeats only overstates a step (a stall adds time, nothing takes it
  // away), so a larger size's time bounds a smaller one's from above, closer than its own.
  // MakeMonotone's mean of the two kept half the stall (batch 128 timed once at 107 ms, 129
  // at 90.9, pooled to 99; served steps at batch 74 ran 35).
  for (std::vector<CurvePoint>* pts : {&c.decode, &c.decode_after_prefill}) {
    double faster = 0;  // the least time of the larger sizes
    for (size_t i = pts->size(); i-- > 0;) {
      CurvePoint& p = (*pts)[i];
      if (faster > 0 && p.us > kNoiseOverLarger * faster) {
        pts->erase(pts->begin() + static_cast<std::ptrdiff_t>(i));
        continue;
      }
      if (faster > 0) p.us = std::min(p.us, faster);
      faster = p.us;
    }
  }
  // What a prefill step before it adds to a decode step, pooled over the sizes timed both ways:
  // the median difference (never below 0), added to each size's back-to-back time. Each size's
  // own pair is noisy (fewer repeats after prefill fit the budget, and single after-prefill
  // steps read several times the slowdown served steps showed: docs/CPU.md), the pool is not.
  std::vector<std::pair<CurvePoint*, const CurvePoint*>> pairs;  // (after, back to back)
  for (CurvePoint& a : c.decode_after_prefill) {
    for (const CurvePoint& d : c.decode) {
      if (d.x == a.x) pairs.emplace_back(&a, &d);
    }
  }
  if (pairs.empty()) return c;
  std::vector<double> added;
  added.reserve(pairs.size());
  for (const auto& [a, d] : pairs) added.push_back(a->us - d->us);
  const double add = std::max(0.0, Quantile(added, 0.5));
  for (const auto& [a, d] : pairs) {
    a->us = d->us + add;
    a->spread = std::max(a->spread, d->spread);
    a->error = std::max(a->error, d->error);
  }
  return c;
}

std::vector<CurvePoint> ContextSlopes(const StepProbe& probe) {
  std::vector<CurvePoint> out;
  const int dc = probe.long_context - probe.decode_context;
  if (probe.long_context <= 0 || dc <= 0) return out;
  auto best = [](const ProbeSeries& s) {
    return *std::min_element(s.wall_us.begin(), s.wall_us.end());
  };
  for (const ProbeSeries& l : probe.series) {
    if (!AtLongContext(probe, l) || l.wall_us.empty()) continue;
    for (const ProbeSeries& s : probe.series) {
      if (s.prefill || s.after_prefill || s.context != probe.decode_context || s.rows != l.rows ||
          s.wall_us.empty())
        continue;
      CurvePoint p;
      p.x = l.rows;
      p.us = std::max(0.0, (best(l) - best(s)) / dc);
      p.samples = static_cast<int>(std::min(l.wall_us.size(), s.wall_us.size()));
      out.push_back(p);
    }
  }
  std::sort(out.begin(), out.end(),
            [](const CurvePoint& a, const CurvePoint& b) { return a.x < b.x; });
  return out;
}

double ContextSlopeAt(const std::vector<CurvePoint>& slopes, double batch) {
  if (slopes.empty()) return -1;
  const CurvePoint& last = slopes.back();
  if (batch > last.x) return last.us * batch / std::max(last.x, 1.0);  // per row beyond it
  if (batch < slopes.front().x) return slopes.front().us * batch / std::max(slopes.front().x, 1.0);
  return std::max(0.0, Interpolate(slopes, batch).us);
}

namespace {

// How the window's steps stand to the probe's at the window's points inside the probe's range.
struct Overlap {
  std::vector<double> window, probe;  // us at the same shapes
  std::vector<double> errors;         // the window points' own errors
};

Overlap Compare(const std::vector<CurvePoint>& window, const std::vector<CurvePoint>& probe) {
  Overlap o;
  for (const CurvePoint& w : window) {
    const CurveLookup l = Interpolate(probe, w.x);
    if (!(l.in_range && l.us > 0)) continue;
    o.window.push_back(w.us);
    o.probe.push_back(l.us);
    o.errors.push_back(w.error);
  }
  return o;
}

// What the window adds to a probed step: window = add_us + ratio x probe. Other load on the cores
// takes a share of every step (a ratio); serving work the probe's steps do not do takes a time
// per step (an addition). Where the overlap spans probe times at least kSpan apart, the line
// through it tells them apart (least squares with ratio >= 1 and add_us >= 0: a window faster
// than the probe's best ran warmer, which larger shapes do not keep: docs/CPU.md). A narrower
// overlap cannot: `split` is then set, and a carried point takes the middle of the pure ratio
// and the pure addition, with half their distance in its error. `error`: how far the overlap's
// points lie from what was carried (root mean square, relative) with the window points' own
// errors, in quadrature.
struct Carry {
  double ratio = 1, add_us = 0, error = 0, spread = 0;
  bool split = false;
};

constexpr double kSpan = 1.5;

Carry CarryOf(const Overlap& o) {
  Carry c;
  const size_t n = o.window.size();
  if (n == 0) return c;
  std::vector<double> ratios(n), diffs(n);
  for (size_t i = 0; i < n; ++i)
    ratios[i] = o.window[i] / o.probe[i], diffs[i] = o.window[i] - o.probe[i];
  const double mid = Quantile(ratios, 0.5);
  c.spread = n < 2 ? 0.0 : (Quantile(ratios, 0.9) - Quantile(ratios, 0.1)) / mid;
  const auto [lo, hi] = std::minmax_element(o.probe.begin(), o.probe.end());
  if (n >= 2 && *hi >= kSpan * *lo) {
    // window - probe = time + (ratio - 1) probe, both terms non-negative (line_fit.h).
    double more = 0;
    FitNonNegativeLine(o.probe, diffs, &c.add_us, &more);
    c.ratio = 1 + more;
    double sq = 0;
    for (size_t i = 0; i < n; ++i) {
      const double r = (c.add_us + c.ratio * o.probe[i]) / o.window[i] - 1;
      sq += r * r;
    }
    c.error = std::hypot(std::sqrt(sq / n), Quantile(o.errors, 0.5));
    return c;
  }
  c.split = true;
  c.ratio = std::max(1.0, mid);
  c.add_us = std::max(0.0, Quantile(diffs, 0.5));
  c.error = std::hypot(c.spread / 2, Quantile(o.errors, 0.5));
  return c;
}

std::vector<CurvePoint> Extend(const std::vector<CurvePoint>& window,
                               const std::vector<CurvePoint>& probe, const Carry& carry) {
  std::vector<CurvePoint> out = window;
  const double lo = window.empty() ? 0 : window.front().x;
  const double hi = window.empty() ? -1 : window.back().x;
  for (CurvePoint p : probe) {
    if (p.x >= lo && p.x <= hi) continue;  // the window's own steps decide there
    p.spread = std::max(p.spread, carry.spread);
    if (carry.split) {
      const double share = p.us * carry.ratio, per_step = p.us + carry.add_us;
      p.us = (share + per_step) / 2;
      p.error = std::hypot(p.error, carry.error) + std::abs(share - per_step) / 2 / p.us;
    } else {
      p.us = carry.add_us + carry.ratio * p.us;
      p.error = std::hypot(p.error, carry.error);
    }
    out.push_back(p);
  }
  std::sort(out.begin(), out.end(),
            [](const CurvePoint& a, const CurvePoint& b) { return a.x < b.x; });
  return out;
}

}  // namespace

StepCurve MergeCurves(const StepCurve& window, const StepCurve& probe) {
  const Overlap od = Compare(window.decode, probe.decode);
  const Overlap oa = Compare(window.decode_after_prefill, probe.decode_after_prefill);
  const Overlap op = Compare(window.prefill, probe.prefill);
  // A kind with no overlap takes the closest kind that has one.
  auto pick = [](std::initializer_list<const Overlap*> order) {
    for (const Overlap* o : order) {
      if (!o->window.empty()) return CarryOf(*o);
    }
    return Carry{};
  };
  StepCurve c;
  c.decode = Extend(window.decode, probe.decode, pick({&od, &oa, &op}));
  c.decode_after_prefill =
      Extend(window.decode_after_prefill, probe.decode_after_prefill, pick({&oa, &od, &op}));
  c.prefill = Extend(window.prefill, probe.prefill, pick({&op, &od, &oa}));
  return c;
}

void MakeMonotone(std::vector<CurvePoint>* pts) {
  struct Pool {
    double weight = 0, mean = 0, spread = 0, error = 0;
    size_t count = 0;
  };
  std::vector<Pool> pools;
  for (const CurvePoint& p : *pts) {
    pools.push_back(Pool{double(std::max(1, p.samples)), p.us, p.spread, p.error, 1});
    while (pools.size() > 1 && pools[pools.size() - 2].mean > pools.back().mean) {
      Pool b = pools.back();
      pools.pop_back();
      Pool& a = pools.back();
      a.mean = (a.mean * a.weight + b.mean * b.weight) / (a.weight + b.weight);
      a.weight += b.weight;
      a.spread = std::max(a.spread, b.spread);
      a.error = std::max(a.error, b.error);
      a.count += b.count;
    }
  }
  size_t i = 0;
  for (const Pool& pool : pools) {
    for (size_t k = 0; k < pool.count; ++k, ++i) {
      (*pts)[i].us = pool.mean;
      (*pts)[i].spread = pool.spread;
      (*pts)[i].error = pool.error;
    }
  }
}

double WindowDrift(const std::vector<StepRecord>& steps, int min_samples) {
  std::vector<const StepRecord*> decode;
  for (const StepRecord& r : steps) {
    if (r.num_prefill_tokens == 0 && r.num_decode_tokens > 0 && r.wall_us() > 0) {
      decode.push_back(&r);
    }
  }
  std::map<int64_t, std::pair<std::vector<double>, std::vector<double>>> halves;  // by rows
  for (size_t i = 0; i < decode.size(); ++i) {
    auto& g = halves[decode[i]->num_decode_tokens];
    (2 * i < decode.size() ? g.first : g.second).push_back(decode[i]->wall_us());
  }
  double moved = 0, weight = 0;
  for (const auto& [rows, g] : halves) {
    const double n = static_cast<double>(std::min(g.first.size(), g.second.size()));
    if (n < std::max(1, min_samples)) continue;
    const double early = Mean(g.first), late = Mean(g.second);
    if (!(early > 0 && late > 0)) continue;
    moved += n * std::abs(late / early - 1);
    weight += n;
  }
  return weight > 0 ? moved / weight : 0;
}

MixPrediction PredictCohorts(const StepLookup& lookup, const WorkloadMix& mix, double concurrency,
                             int max_num_seqs, int budget) {
  MixPrediction m;
  const double n = std::max(1.0, std::min(concurrency, double(std::max(1, max_num_seqs))));
  const double prompt = std::max(0.0, mix.prompt_tokens);
  const double out_len = std::max(1.0, mix.output_tokens);
  const double decode_steps = out_len - 1;
  const double rows = n * prompt, room = std::max(1, budget);
  const double prefill_steps = prompt > 0 ? std::ceil(rows / room) : 0;
  CurveLookup pre{}, dec{};
  double prefill_us = 0, decode_us = 0;
  if (prefill_steps > 0) {
    pre = lookup(std::min(rows, room), 0, true, 0);
    prefill_us = pre.us * rows / std::min(rows, room);  // full steps and the last part one
  }
  if (decode_steps > 0) {
    dec = lookup(n, n, false, prefill_steps > 0 ? 1 / decode_steps : 0);
    decode_us = decode_steps * dec.us;
  }
  const double cycle = std::max(prefill_us + decode_us, 1e-3);
  const double steps = std::max(1.0, prefill_steps + decode_steps);
  m.decode_batch = n;
  m.tpot_ms = cycle / steps * 1e-3;
  m.output_tokens_per_s = n * out_len / cycle * 1e6;
  m.prefill_share = prefill_us / cycle;
  m.prefill_step_fraction = prefill_steps / steps;
  m.decode_step_us = decode_steps > 0 ? dec.us : 0;
  m.mixed_step_us = prefill_steps > 0 ? pre.us : 0;
  m.mixed_rows = prefill_steps > 0 ? std::min(rows, room) : 0;
  m.output_tokens_per_step = n * out_len / steps;
  m.in_range = (decode_steps <= 0 || dec.in_range) && (prefill_steps <= 0 || pre.in_range);
  m.rel_error = (decode_us * dec.rel_error + prefill_us * pre.rel_error) / cycle;
  return m;
}

MixPrediction PredictMix(const StepLookup& lookup, const WorkloadMix& mix, double concurrency,
                         int max_num_seqs, int budget, double cohort) {
  if (cohort > 0) {
    const MixPrediction p = PredictMix(lookup, mix, concurrency, max_num_seqs, budget, 0);
    const MixPrediction c = PredictCohorts(lookup, mix, concurrency, max_num_seqs, budget);
    const double s = std::min(cohort, 1.0);
    auto blend = [s](double a, double b) { return (1 - s) * a + s * b; };
    MixPrediction m = s >= 1 ? c : p;
    m.output_tokens_per_s = blend(p.output_tokens_per_s, c.output_tokens_per_s);
    m.tpot_ms = blend(p.tpot_ms, c.tpot_ms);
    m.decode_batch = blend(p.decode_batch, c.decode_batch);
    m.prefill_share = blend(p.prefill_share, c.prefill_share);
    m.prefill_step_fraction = blend(p.prefill_step_fraction, c.prefill_step_fraction);
    m.output_tokens_per_step = blend(p.output_tokens_per_step, c.output_tokens_per_step);
    m.in_range = p.in_range && c.in_range;
    const double apart = std::abs(p.output_tokens_per_s - c.output_tokens_per_s) /
                         std::max(p.output_tokens_per_s + c.output_tokens_per_s, 1e-9);
    m.rel_error = blend(p.rel_error, c.rel_error) + apart * (1 - std::abs(2 * s - 1));
    return m;
  }
  MixPrediction m;
  const double n = std::max(1.0, std::min(concurrency, double(std::max(1, max_num_seqs))));
  const double prompt = std::max(0.0, mix.prompt_tokens);
  const double out_len = std::max(1.0, mix.output_tokens);
  const double decode_steps = out_len - 1;  // the first token comes from the prefill step
  // Slots held by requests still in prefill: a prompt takes ceil(P / room) chunked steps.
  double nd = n, room = 1, chunks = 0;
  for (int it = 0; it < 20; ++it) {
    room = std::max(1.0, budget - nd);
    chunks = prompt > 0 ? std::ceil(prompt / room) : 0;
    nd = decode_steps > 0 ? n * decode_steps / (decode_steps + chunks) : 0;
  }
  // Requests entering per step, capped by the prefill rows a step can take.
  double k = decode_steps > 0 ? nd / decode_steps : n / std::max(1.0, chunks);
  if (prompt > 0) k = std::min(k, room / prompt);
  if (decode_steps > 0) nd = std::min(nd, k * decode_steps);
  const double rows_needed = k * prompt;  // prefill rows per step on average
  // Arrivals from independent clients are a Poisson stream (the superposition of many
  // independent renewal streams tends to one: Palm-Khintchine), so k per step arrive in bunches:
  // a share 1 - e^-k of the steps take one or more new prompts, k / (1 - e^-k) each on average
  // (measured on closed loops of 40 clients: 0.44-0.49 of the steps carried prefill at k = 0.6-0.7,
  // with 1.4 prompts each, where spreading them evenly had said 0.7 and 1).
  const double bunch = k > 1e-9 ? k / -std::expm1(-k) : 1;
  const double chunk = prompt > 0 ? std::min(std::max(prompt * bunch, rows_needed), room) : 0;
  const double f = chunk > 0 ? std::min(1.0, rows_needed / chunk) : 0;  // steps carrying prefill
  CurveLookup dec{}, mixed{};
  double avg = 0;
  if (f < 1) {
    // Steps are independent draws: a decode step follows one carrying prefill with chance f.
    const double after = f;
    dec = lookup(std::max(nd, 1.0), std::max(nd, 1.0), false, after);
    avg += (1 - f) * dec.us;
  }
  if (f > 0) {
    mixed = lookup(nd + chunk, nd, true, 0);
    avg += f * mixed.us;
  }
  avg = std::max(avg, 1e-3);
  m.decode_batch = nd;
  m.tpot_ms = avg * 1e-3;
  m.output_tokens_per_s = k * out_len / avg * 1e6;
  m.prefill_share = f > 0 ? f * mixed.us / avg : 0;
  m.prefill_step_fraction = f;
  m.decode_step_us = f < 1 ? dec.us : 0;
  m.mixed_step_us = f > 0 ? mixed.us : 0;
  m.mixed_rows = f > 0 ? nd + chunk : 0;
  m.output_tokens_per_step = k * out_len;
  m.in_range = (f >= 1 || dec.in_range) && (f <= 0 || mixed.in_range);
  m.rel_error = (1 - f) * dec.rel_error + f * mixed.rel_error + (f > 0 ? kMixModelError : 0);
  return m;
}

}  // namespace saturn
