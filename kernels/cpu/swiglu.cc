// SwiGLU on the CPU: out[t, j] = silu(gate_up[t, j]) * gate_up[t, F + j], F = out width; each
// row by the instruction-set level's SwiGluRow (16 lanes, the polynomial Exp of simd16.inc).
#include "kernels/cpu/isa_kernels.h"
#include "kernels/cpu/ops.h"

namespace saturn::cpu {

absl::Status SwiGlu(ThreadPool& pool, const IsaKernels& kernels, const Tensor& gate_up,
                    const Tensor& out) {
  if (absl::Status s = ExpectF32("gate_up", gate_up); !s.ok()) return s;
  if (absl::Status s = ExpectF32("out", out); !s.ok()) return s;
  const int64_t f = out.cols;
  pool.ParallelFor(out.rows, RowGrain(gate_up.cols), [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const float* g = gate_up.as<float>() + t * 2 * f;
      kernels.swiglu_row(g, g + f, out.as<float>() + t * f, f);
    }
  });
  return absl::OkStatus();
}

}  // namespace saturn::cpu
