// Non-negative least squares of a line (line_fit.h).
#include "engine/measure/line_fit.h"

#include <algorithm>
#include <cmath>

namespace saturn {

void FitNonNegativeLine(const std::vector<double>& x, const std::vector<double>& y, double* h0,
                        double* h1) {
  const double n = double(x.size());
  *h0 = 0, *h1 = 0;
  if (x.empty()) return;
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    sx += x[i], sy += y[i], sxx += x[i] * x[i], sxy += x[i] * y[i];
  }
  const double det = n * sxx - sx * sx;
  if (det > 1e-9 * n * sxx) {
    const double b = (n * sxy - sx * sy) / det, a = (sy - b * sx) / n;
    if (a >= 0 && b >= 0) {
      *h0 = a, *h1 = b;
      return;
    }
  }
  const double a_only = std::max(0.0, sy / n);
  const double b_only = sxx > 0 ? std::max(0.0, sxy / sxx) : 0;
  double e_a = 0, e_b = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    e_a += std::pow(y[i] - a_only, 2);
    e_b += std::pow(y[i] - b_only * x[i], 2);
  }
  if (e_a <= e_b) {
    *h0 = a_only;
  } else {
    *h1 = b_only;
  }
}

}  // namespace saturn
