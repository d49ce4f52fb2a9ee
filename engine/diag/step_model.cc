// Fitting the step-time model (step_model.h).
//
// Per class, the device term max(b u, f v) (u = 1/BW, v = 1/P) is piecewise linear: a step
// is on the memory side when its intensity f/b is under the class's effective ridge u/v.
// Sorting the samples by intensity, every consistent memory/compute split is a prefix, so
// we try each prefix, fit u on the prefix and v on the rest (least squares through the
// origin, non-negative by construction), score the max-form model on all samples (BIC:
// n ln(SSE/n) + p ln n, so a second rate must earn its parameter) and keep the best. A side with no
// samples keeps the calibrated ceiling; on exact ties the split the calibrated roofline predicts
// wins.
#include "engine/diag/step_model.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "engine/measure/line_fit.h"

namespace saturn {
namespace {

struct Sample {
  double b, f, y, intensity;
};

double Floor(double b, double f, double u, double v) { return std::max(b * u, f * v); }

ClassRates FitMax(std::vector<Sample> s, double u0, double v0) {
  ClassRates r;
  r.bytes_per_us = 1.0 / u0;
  r.flops_per_us = 1.0 / v0;
  r.samples = static_cast<int>(s.size());
  if (s.empty()) return r;
  if (s.size() > 1024) {  // keep the search O(1024^2)
    std::vector<Sample> sub;
    sub.reserve(1024);
    const double stride = double(s.size()) / 1024.0;
    for (int i = 0; i < 1024; ++i) sub.push_back(s[static_cast<size_t>(i * stride)]);
    s.swap(sub);
  }
  std::sort(s.begin(), s.end(),
            [](const Sample& a, const Sample& b) { return a.intensity < b.intensity; });
  const size_t n = s.size();
  double best = std::numeric_limits<double>::infinity(), best_sse = 0, yy = 0;
  for (const Sample& x : s) yy += x.y * x.y;
  const double eps = 1e-9 * yy + 1e-12;
  bool best_calibrated_side = false;
  // Which side the calibrated roofline puts the samples on: breaks exact ties.
  double mb = 0, mf = 0;
  for (const Sample& x : s) mb += x.b * u0, mf += x.f * v0;
  for (size_t k = 0; k <= n; ++k) {
    // A split between equal intensities is no split: both sides would see the same steps.
    if (k > 0 && k < n && !(s[k - 1].intensity < s[k].intensity)) continue;
    double yb = 0, bb = 0, yf = 0, ff = 0;
    for (size_t i = 0; i < k; ++i) yb += s[i].y * s[i].b, bb += s[i].b * s[i].b;
    for (size_t i = k; i < n; ++i) yf += s[i].y * s[i].f, ff += s[i].f * s[i].f;
    const bool fit_u = bb > 0, fit_v = ff > 0;
    const double u = fit_u ? yb / bb : u0, v = fit_v ? yf / ff : v0;
    double sse = 0;
    for (const Sample& x : s) sse += std::pow(Floor(x.b, x.f, u, v) - x.y, 2);
    // BIC-style score: a split that fits both rates spends a parameter and must earn it,
    // else one regime's steps would extrapolate a rate they never exercised.
    const int params = (k > 0 && fit_u) + (k < n && fit_v);
    const double score =
        double(n) * std::log((sse + eps) / double(n)) + params * std::log(std::max(2.0, double(n)));
    const bool calibrated_side = (k == n) == (mb >= mf) || (k > 0 && k < n);
    if (std::isinf(best) || score < best - 1e-9 ||
        (std::abs(score - best) <= 1e-9 && calibrated_side && !best_calibrated_side)) {
      best = score;
      best_sse = sse;
      best_calibrated_side = calibrated_side;
      r.bytes_per_us = u > 0 ? 1.0 / u : 1.0 / u0;
      r.flops_per_us = v > 0 ? 1.0 / v : 1.0 / v0;
      r.bandwidth_fitted = fit_u && u > 0;
      r.compute_fitted = fit_v && v > 0;
    }
  }
  r.rms_error_us = std::sqrt(best_sse / double(n));
  return r;
}

// Whether the samples' intensities span two groups of at least two steps each (a step is one
// sample of a class): with one step alone at its intensity, a burst of contention during that
// step alone sets the split (measured: a window of one 8-row prefill and seven decodes under
// two busy processes fitted a compute rate that put the plateau at batch 1).
bool TwoSupportedIntensities(const std::vector<Sample>& s) {
  if (s.size() < 4) return false;
  double lo = s.front().intensity, hi = lo;
  for (const Sample& x : s) lo = std::min(lo, x.intensity), hi = std::max(hi, x.intensity);
  const double mid = std::sqrt(std::max(lo, 1e-12) * hi);  // halfway in log scale
  if (!(hi > 1.05 * lo)) return false;
  int below = 0, above = 0;
  for (const Sample& x : s) (x.intensity < mid ? below : above) += 1;
  return below >= 2 && above >= 2;
}

// y = b u + f v by non-negative least squares; with one intensity (collinear b and f), or an
// intensity only one step has, v keeps the calibrated value and u absorbs the rest.
ClassRates FitSum(const std::vector<Sample>& s, double u0, double v0) {
  ClassRates r;
  r.additive = true;
  r.samples = static_cast<int>(s.size());
  double bb = 0, ff = 0, bf = 0, yb = 0, yf = 0;
  for (const Sample& x : s) {
    bb += x.b * x.b, ff += x.f * x.f, bf += x.b * x.f, yb += x.y * x.b, yf += x.y * x.f;
  }
  double u = u0, v = v0;
  const double det = bb * ff - bf * bf;
  if (det > 1e-6 * bb * ff && TwoSupportedIntensities(s)) {
    u = (yb * ff - yf * bf) / det;
    v = (yf * bb - yb * bf) / det;
    r.bandwidth_fitted = r.compute_fitted = true;
  }
  if (!r.bandwidth_fitted || u <= 0 || v <= 0) {
    r.bandwidth_fitted = r.compute_fitted = false;
    if (bb > 0) {  // fit the memory term, the calibrated compute term fixed
      u = std::max(0.05 * u0, (yb - v0 * bf) / bb);
      v = v0;
      r.bandwidth_fitted = true;
    }
  }
  r.bytes_per_us = 1.0 / u;
  r.flops_per_us = 1.0 / v;
  double sse = 0;
  for (const Sample& x : s) sse += std::pow(x.b * u + x.f * v - x.y, 2);
  r.rms_error_us = s.empty() ? 0 : std::sqrt(sse / double(s.size()));
  return r;
}

ClassRates FitClass(const std::vector<Sample>& s, double u0, double v0, bool additive_default) {
  ClassRates mx = FitMax(s, u0, v0);
  ClassRates sum = FitSum(s, u0, v0);
  ClassRates& def = additive_default ? sum : mx;
  ClassRates& alt = additive_default ? mx : sum;
  // Two intensity clusters fit either form exactly; only three or more, with both rates
  // identified, can tell them apart, and the other form must then fit clearly better.
  std::vector<double> in;
  in.reserve(s.size());
  for (const Sample& x : s) in.push_back(x.intensity);
  std::sort(in.begin(), in.end());
  int clusters = in.empty() ? 0 : 1;
  for (size_t i = 1; i < in.size(); ++i) clusters += in[i] > 1.05 * in[i - 1];
  if (clusters >= 3 && mx.bandwidth_fitted && mx.compute_fitted && sum.compute_fitted &&
      alt.rms_error_us < 0.8 * def.rms_error_us) {
    return alt;
  }
  return def;
}

}  // namespace

StepCost CostOf(const StepRecord& r) {
  StepCost c{};
  for (size_t i = 0; i < kNumOpClasses; ++i) {
    c[i].flops = r.by_class[i].flops;
    c[i].bytes = r.by_class[i].bytes;
    c[i].ops = r.by_class[i].count;
  }
  return c;
}

double StepModel::ClassUs(size_t c, const ClassCost& cost) const {
  const ClassRates& r = rates[c];
  const double mem = r.bytes_per_us > 0 ? cost.bytes / r.bytes_per_us : 0;
  const double cmp = r.flops_per_us > 0 ? cost.flops / r.flops_per_us : 0;
  return cost.ops * op_overhead_us + (r.additive ? mem + cmp : std::max(mem, cmp));
}

double StepModel::DeviceUs(const StepCost& cost) const {
  double t = 0;
  for (size_t c = 0; c < kNumOpClasses; ++c) t += ClassUs(c, cost[c]);
  return t;
}

double StepModel::PredictUs(const StepCost& cost, double num_seqs) const {
  return host_us + host_us_per_seq * num_seqs + DeviceUs(cost);
}

StepModel FitStepModel(const std::vector<StepRecord>& steps, const Calibration& cal,
                       int additive_choice) {
  StepModel m;
  m.dispatch_us = cal.op_dispatch_us;
  m.op_overhead_us = cal.backend == "cpu" ? cal.op_dispatch_us : 0.0;
  const double u0 = cal.bandwidth_bytes_per_s > 0 ? 1e6 / cal.bandwidth_bytes_per_s : 0;
  const double v0 = cal.gemm_flops_per_s > 0 ? 1e6 / cal.gemm_flops_per_s : 0;
  std::array<std::vector<Sample>, kNumOpClasses> samples;
  std::vector<double> seqs, host;
  std::vector<double> fallback_host;
  for (const StepRecord& r : steps) {
    fallback_host.push_back(r.schedule_us + r.prepare_us + r.postprocess_us - r.hidden_host_us);
    if (!r.per_op_timed) continue;
    double device = 0;
    for (size_t c = 0; c < kNumOpClasses; ++c) {
      const OpClassStats& s = r.by_class[c];
      device += s.device_us;
      if (s.count == 0) continue;
      const double y = std::max(0.0, s.device_us - s.count * m.op_overhead_us);
      const double inten = s.bytes > 0 ? s.flops / s.bytes : std::numeric_limits<double>::max();
      samples[c].push_back({s.bytes, s.flops, y, inten});
    }
    seqs.push_back(r.num_seqs);
    host.push_back(std::max(0.0, r.wall_us() - device));
  }
  if (u0 <= 0 || v0 <= 0) return m;
  const bool additive = additive_choice >= 0 ? additive_choice == 1 : cal.backend == "cpu";
  for (size_t c = 0; c < kNumOpClasses; ++c) {
    m.rates[c] = FitClass(samples[c], u0, v0, additive);
  }
  m.fitted_steps = static_cast<int>(host.size());
  if (!host.empty()) {
    // A step the OS descheduled shows a host remainder many times the usual one; such
    // outliers would drag a least-squares mean far from the typical step, so drop them.
    std::vector<double> sorted = host;
    std::nth_element(sorted.begin(), sorted.begin() + sorted.size() / 2, sorted.end());
    const double cut = 4.0 * sorted[sorted.size() / 2] + 50.0;
    std::vector<double> xs, ys;
    for (size_t i = 0; i < host.size(); ++i) {
      if (host[i] <= cut) xs.push_back(seqs[i]), ys.push_back(host[i]);
    }
    FitNonNegativeLine(xs, ys, &m.host_us, &m.host_us_per_seq);
  } else if (!fallback_host.empty()) {
    double sum = 0;
    for (double h : fallback_host) sum += h;
    m.host_us = sum / double(fallback_host.size());
  }
  double err = 0;
  int n = 0;
  for (const StepRecord& r : steps) {
    if (r.wall_us() <= 0) continue;
    err += std::abs(m.PredictUs(CostOf(r), r.num_seqs) - r.wall_us()) / r.wall_us();
    ++n;
  }
  m.fit_error = n > 0 ? err / n : 0;
  return m;
}

}  // namespace saturn
