// The step-time model, fitted to this server's own measured steps:
//
//   step_us = h0 + h1 * num_seqs                      (host: schedule, prepare, postprocess,
//                                                      launch gaps: all outside timed ops)
//           + sum over op classes c of
//               ops_c * d_op  +  max(bytes_c / BW_c, flops_c / P_c)
//                              (or bytes_c / BW_c + flops_c / P_c, see ClassRates::additive)
//
// d_op is the part of the calibrated per-op dispatch cost that lands inside an op's timed
// interval (all of it on the CPU backend, whose ops run synchronously; none on CUDA, where
// launches overlap earlier kernels and show up as gaps in the host term). BW_c and P_c are
// effective per-class rates fitted by least squares on the steps whose ops were timed (exact search
// over the memory/compute split, see step_model.cc); a rate the window cannot identify (every step
// of the class on one side of the ridge) falls back to the calibrated ceiling. h0, h1 are fitted by
// non-negative least squares on the per-step host remainder. docs/DIAGNOSTICS.md explains it.
#pragma once

#include <array>
#include <string>
#include <vector>

#include "engine/diag/step_cost.h"
#include "engine/measure/calibration.h"
#include "engine/measure/step_record.h"

namespace saturn {

struct ClassRates {
  double bytes_per_us = 0;        // effective bandwidth (bytes per microsecond)
  double flops_per_us = 0;        // effective compute rate
  bool bandwidth_fitted = false;  // false: calibrated ceiling used
  bool compute_fitted = false;
  // How the two terms combine: max (the roofline: memory and compute overlap, as on GPUs)
  // or their sum (they do not overlap: what CPU GEMMs at small M do). Chosen by fit when
  // the window spans several intensities, else the backend's default (sum on cpu).
  bool additive = false;
  int samples = 0;
  double rms_error_us = 0;  // fit residual over the class's timed samples
};

struct StepModel {
  double host_us = 0;          // h0
  double host_us_per_seq = 0;  // h1
  double dispatch_us = 0;      // calibrated per-op dispatch cost
  double op_overhead_us = 0;   // d_op: the share of it inside each op's timed interval
  std::array<ClassRates, kNumOpClasses> rates{};
  int fitted_steps = 0;
  double fit_error = 0;  // mean |predicted - measured| / measured over the window's steps

  // Predicted wall time of a step with the given per-class cost and sequence count.
  double PredictUs(const StepCost& cost, double num_seqs) const;
  // Just the device part (sum over classes), no host term.
  double DeviceUs(const StepCost& cost) const;
  // Per-class predicted time.
  double ClassUs(size_t c, const ClassCost& cost) const;
};

// The per-class cost recorded in a step record.
StepCost CostOf(const StepRecord& r);

// Fits the model to `steps` (any order). Never fails: with no usable steps every rate is the
// calibrated ceiling and the host term is zero. `additive`: the roofline form where the window
// cannot choose (1 sum, 0 max, -1 the backend's default: sum on "cpu", max elsewhere).
StepModel FitStepModel(const std::vector<StepRecord>& steps, const Calibration& cal,
                       int additive = -1);

}  // namespace saturn
