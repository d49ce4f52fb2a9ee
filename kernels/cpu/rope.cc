// Rotary position embedding on the CPU, in place, Hugging Face Llama "rotate half" pairing:
// element i of a head rotates with element i + head_dim/2 by pos * theta^(-2i/head_dim), that
// frequency scaled as kernels/rope_params.h says (Llama 3.x).
// Angles and their sines are taken in double: at positions in the thousands an f32 angle
// is already off by ~1e-4 rad.
#include <cmath>
#include <vector>

#include "kernels/cpu/ops.h"

namespace saturn::cpu {
namespace {

void RotateHeads(float* row, int64_t num_heads, int64_t head_dim, const float* cos_t,
                 const float* sin_t) {
  const int64_t half = head_dim / 2;
  for (int64_t h = 0; h < num_heads; ++h) {
    float* x1 = row + h * head_dim;
    float* x2 = x1 + half;
    for (int64_t i = 0; i < half; ++i) {
      const float a = x1[i], b = x2[i];
      x1[i] = a * cos_t[i] - b * sin_t[i];
      x2[i] = b * cos_t[i] + a * sin_t[i];
    }
  }
}

}  // namespace

absl::Status Rope(ThreadPool& pool, const Tensor& q, const Tensor& k, const Tensor& positions,
                  int head_dim, const RopeParams& rope) {
  if (absl::Status s = ExpectF32("q", q); !s.ok()) return s;
  if (absl::Status s = ExpectF32("k", k); !s.ok()) return s;
  const int64_t half = head_dim / 2;
  std::vector<double> inv_freq(half);
  for (int64_t i = 0; i < half; ++i) {
    inv_freq[i] = RopeInvFreq(rope, static_cast<int>(i), head_dim);
  }
  const int64_t hq = q.cols / head_dim, hk = k.cols / head_dim;
  pool.ParallelFor(q.rows, RowGrain(q.cols + k.cols), [&](int64_t begin, int64_t end) {
    std::vector<float> cos_t(half), sin_t(half);
    for (int64_t t = begin; t < end; ++t) {
      const double pos = positions.as<int32_t>()[t];
      for (int64_t i = 0; i < half; ++i) {
        const double angle = pos * inv_freq[i];
        cos_t[i] = static_cast<float>(std::cos(angle));
        sin_t[i] = static_cast<float>(std::sin(angle));
      }
      RotateHeads(q.as<float>() + t * q.cols, hq, head_dim, cos_t.data(), sin_t.data());
      RotateHeads(k.as<float>() + t * k.cols, hk, head_dim, cos_t.data(), sin_t.data());
    }
  });
  return absl::OkStatus();
}

}  // namespace saturn::cpu
