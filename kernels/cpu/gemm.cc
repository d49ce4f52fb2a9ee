// GEMM on the CPU: out[M, N] = x[M, K] * w[N, K]^T (f32). Large M goes to OpenBLAS sgemm.
// Skinny M (decode batches) runs a weight-streaming kernel of our own: each weight row is
// read from memory once and multiplied against all M input rows while it sits in L1, so a
// decode step costs one pass over the weights whatever the batch. OpenBLAS's small-M sgemm
// and its sgemv do not reach that on this path (measured: bench/results/).
#include <cblas.h>

#include <algorithm>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "kernels/cpu/ops.h"

namespace saturn::cpu {
namespace {

// Rows of x up to which the skinny kernel beats or ties OpenBLAS sgemm: measured with
// saturn-bench-gemm on the 2-core CI machine class (2026-11-29: skinny ahead at every M up
// to 48, the two within noise at 64-128, sgemm ahead from 256).
constexpr int64_t kSkinnyMaxM = 64;

void SkinnyRowsScalar(const float* x, const float* w, float* out, int64_t m, int64_t n,
                      int64_t k, int64_t n_begin, int64_t n_end) {
  for (int64_t j = n_begin; j < n_end; ++j) {
    const float* wr = w + j * k;
    for (int64_t i = 0; i < m; ++i) {
      const float* xr = x + i * k;
      float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      int64_t p = 0;
      for (; p + 8 <= k; p += 8) {
        for (int u = 0; u < 8; ++u) acc[u] += xr[p + u] * wr[p + u];
      }
      float s = 0;
      for (; p < k; ++p) s += xr[p] * wr[p];
      for (float a : acc) s += a;
      out[i * n + j] = s;
    }
  }
}

#if defined(__x86_64__)
__attribute__((target("avx2,fma"))) inline float HSum(__m256 v) {
  const __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
  __m128 s = _mm_add_ps(lo, hi);
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}

// Four weight rows at a time against every x row: 4 x 8-wide FMA chains per x row.
__attribute__((target("avx2,fma"))) void SkinnyRowsAvx2(const float* x, const float* w,
                                                        float* out, int64_t m, int64_t n,
                                                        int64_t k, int64_t n_begin,
                                                        int64_t n_end) {
  const int64_t k8 = k & ~int64_t{7};
  int64_t j = n_begin;
  for (; j + 4 <= n_end; j += 4) {
    const float* w0 = w + j * k;
    const float* w1 = w0 + k;
    const float* w2 = w1 + k;
    const float* w3 = w2 + k;
    for (int64_t i = 0; i < m; ++i) {
      const float* xr = x + i * k;
      __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), a2 = _mm256_setzero_ps(),
             a3 = _mm256_setzero_ps();
      for (int64_t p = 0; p < k8; p += 8) {
        const __m256 xv = _mm256_loadu_ps(xr + p);
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(w0 + p), xv, a0);
        a1 = _mm256_fmadd_ps(_mm256_loadu_ps(w1 + p), xv, a1);
        a2 = _mm256_fmadd_ps(_mm256_loadu_ps(w2 + p), xv, a2);
        a3 = _mm256_fmadd_ps(_mm256_loadu_ps(w3 + p), xv, a3);
      }
      float s0 = HSum(a0), s1 = HSum(a1), s2 = HSum(a2), s3 = HSum(a3);
      for (int64_t p = k8; p < k; ++p) {
        s0 += xr[p] * w0[p];
        s1 += xr[p] * w1[p];
        s2 += xr[p] * w2[p];
        s3 += xr[p] * w3[p];
      }
      float* o = out + i * n + j;
      o[0] = s0;
      o[1] = s1;
      o[2] = s2;
      o[3] = s3;
    }
  }
  if (j < n_end) SkinnyRowsScalar(x, w, out, m, n, k, j, n_end);
}

bool HasAvx2() {
  static const bool yes = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return yes;
}
#endif

}  // namespace

absl::Status Gemm(ThreadPool& pool, const Tensor& x, const Tensor& w, const Tensor& out,
                  GemmPath path) {
  for (auto [name, t] : {std::pair{"x", &x}, std::pair{"w", &w}, std::pair{"out", &out}}) {
    if (absl::Status s = ExpectF32(name, *t); !s.ok()) return s;
  }
  const int64_t m = x.rows, n = w.rows, k = x.cols;
  if (n == 0 || m == 0) return absl::OkStatus();
  const bool skinny = path == GemmPath::kAuto ? m <= kSkinnyMaxM : path == GemmPath::kSkinny;
  if (skinny) {
    const float* xp = x.as<float>();
    const float* wp = w.as<float>();
    float* op = out.as<float>();
    // Chunks of whole 4-row groups; at least ~64 KiB of weights per chunk.
    const int64_t grain = std::max<int64_t>(4, (16384 / std::max<int64_t>(k, 1) + 3) & ~3);
    pool.ParallelFor((n + 3) / 4, std::max<int64_t>(1, grain / 4), [&](int64_t b, int64_t e) {
      const int64_t nb = b * 4, ne = std::min(n, e * 4);
#if defined(__x86_64__)
      if (HasAvx2()) {
        SkinnyRowsAvx2(xp, wp, op, m, n, k, nb, ne);
        return;
      }
#endif
      SkinnyRowsScalar(xp, wp, op, m, n, k, nb, ne);
    });
    return absl::OkStatus();
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<blasint>(m),
              static_cast<blasint>(n), static_cast<blasint>(k), 1.0f, x.as<float>(),
              static_cast<blasint>(k), w.as<float>(), static_cast<blasint>(k), 0.0f,
              out.as<float>(), static_cast<blasint>(n));
  return absl::OkStatus();
}

}  // namespace saturn::cpu
