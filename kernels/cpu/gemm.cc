// GEMM on the CPU: out[M, N] = x[M, K] * w[N, K]^T through OpenBLAS (f32 only). Batch-1
// decode uses sgemv, which OpenBLAS runs faster than an M=1 sgemm.
#include <cblas.h>

#include "kernels/cpu/ops.h"

namespace saturn::cpu {

absl::Status Gemm(const Tensor& x, const Tensor& w, const Tensor& out) {
  for (auto [name, t] : {std::pair{"x", &x}, std::pair{"w", &w}, std::pair{"out", &out}}) {
    if (absl::Status s = ExpectF32(name, *t); !s.ok()) return s;
  }
  const auto m = static_cast<blasint>(x.rows);
  const auto n = static_cast<blasint>(w.rows);
  const auto k = static_cast<blasint>(x.cols);
  if (n == 0) return absl::OkStatus();
  if (m == 1) {
    cblas_sgemv(CblasRowMajor, CblasNoTrans, n, k, 1.0f, w.as<float>(), k, x.as<float>(), 1, 0.0f,
                out.as<float>(), 1);
  } else {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, k, 1.0f, x.as<float>(), k,
                w.as<float>(), k, 0.0f, out.as<float>(), n);
  }
  return absl::OkStatus();
}

}  // namespace saturn::cpu
