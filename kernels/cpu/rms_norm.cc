// RMSNorm and the fused residual-add + RMSNorm on the CPU, one row per work item. Both are
// safe when out aliases x (AddRmsNorm finishes the residual pass before writing out).
#include <cmath>

#include "kernels/cpu/ops.h"

namespace saturn::cpu {
namespace {

// out = x * (1 / sqrt(mean(x^2) + eps)) * w for one row of length n.
void NormRow(const float* x, const float* w, float eps, int64_t n, float* out) {
  const float inv = 1.0f / std::sqrt(SumSquares(x, n) / static_cast<float>(n) + eps);
  for (int64_t j = 0; j < n; ++j) out[j] = x[j] * inv * w[j];
}

}  // namespace

absl::Status RmsNorm(ThreadPool& pool, const Tensor& x, const Tensor& weight, float eps,
                     const Tensor& out) {
  for (auto [name, t] :
       {std::pair{"x", &x}, std::pair{"weight", &weight}, std::pair{"out", &out}}) {
    if (absl::Status s = ExpectF32(name, *t); !s.ok()) return s;
  }
  const int64_t d = x.cols;
  pool.ParallelFor(x.rows, RowGrain(d), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      NormRow(x.as<float>() + r * d, weight.as<float>(), eps, d, out.as<float>() + r * d);
    }
  });
  return absl::OkStatus();
}

absl::Status AddRmsNorm(ThreadPool& pool, const Tensor& x, const Tensor& residual,
                        const Tensor& weight, float eps, const Tensor& out) {
  for (auto [name, t] : {std::pair{"x", &x}, std::pair{"residual", &residual},
                         std::pair{"weight", &weight}, std::pair{"out", &out}}) {
    if (absl::Status s = ExpectF32(name, *t); !s.ok()) return s;
  }
  const int64_t d = x.cols;
  pool.ParallelFor(x.rows, RowGrain(d), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* xr = x.as<float>() + r * d;
      float* res = residual.as<float>() + r * d;
      for (int64_t j = 0; j < d; ++j) res[j] += xr[j];
      NormRow(res, weight.as<float>(), eps, d, out.as<float>() + r * d);
    }
  });
  return absl::OkStatus();
}

}  // namespace saturn::cpu
