// Non-negative least squares for y = h0 + h1 x (two unknowns): the unconstrained solution where
// both are >= 0, else the better of the two one-variable fits (h0 alone, or h1 alone). The step
// model's host time per step and per sequence, and the tensor-parallel all-reduce's latency and
// time per byte, are fitted with it.
#pragma once

#include <vector>

namespace saturn {

void FitNonNegativeLine(const std::vector<double>& x, const std::vector<double>& y, double* h0,
                        double* h1);

}  // namespace saturn
