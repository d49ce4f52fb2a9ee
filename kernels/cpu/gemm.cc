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

// When the skinny kernel beats OpenBLAS sgemm: its x rows are re-read from cache for every
// group of four weight rows, so they must stay cache-resident. Measured with saturn-bench-gemm
// on the 2-core CI machine class (2026-11-29, quiet machine): at K=768 skinny wins up to M=48
// (x = 144 KiB); at K=2048 it wins at M=16 (128 KiB) and loses from M=24 (192 KiB).
constexpr int64_t kSkinnyMaxM = 64;
constexpr int64_t kSkinnyMaxXBytes = 160 * 1024;

void SkinnyRowsScalar(const float* x, const float* w, float* out, int64_t m, int64_t n, int64_t k,
                      int64_t n_begin, int64_t n_end) {
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

// Four weight rows at a time against the x rows, two x rows per pass: 8 FMA chains share
// 6 loads (4 weight vectors, 2 x vectors), so the loop is bound by FMAs rather than loads.
__attribute__((target("avx2,fma"))) inline void Store4(float* o, __m256 a0, __m256 a1, __m256 a2,
                                                       __m256 a3, const float* xr,
                                                       const float* const w[4], int64_t k8,
                                                       int64_t k) {
  float s[4] = {HSum(a0), HSum(a1), HSum(a2), HSum(a3)};
  for (int64_t p = k8; p < k; ++p) {
    for (int r = 0; r < 4; ++r) s[r] += xr[p] * w[r][p];
  }
  for (int r = 0; r < 4; ++r) o[r] = s[r];
}

__attribute__((target("avx2,fma"))) void SkinnyRowsAvx2(const float* x, const float* w, float* out,
                                                        int64_t m, int64_t n, int64_t k,
                                                        int64_t n_begin, int64_t n_end) {
  const int64_t k8 = k & ~int64_t{7};
  int64_t j = n_begin;
  for (; j + 4 <= n_end; j += 4) {
    const float* const wr[4] = {w + j * k, w + (j + 1) * k, w + (j + 2) * k, w + (j + 3) * k};
    int64_t i = 0;
    for (; i + 2 <= m; i += 2) {
      const float* x0 = x + i * k;
      const float* x1 = x0 + k;
      __m256 a00 = _mm256_setzero_ps(), a01 = _mm256_setzero_ps(), a02 = _mm256_setzero_ps(),
             a03 = _mm256_setzero_ps(), a10 = _mm256_setzero_ps(), a11 = _mm256_setzero_ps(),
             a12 = _mm256_setzero_ps(), a13 = _mm256_setzero_ps();
      for (int64_t p = 0; p < k8; p += 8) {
        const __m256 xv0 = _mm256_loadu_ps(x0 + p), xv1 = _mm256_loadu_ps(x1 + p);
        const __m256 w0 = _mm256_loadu_ps(wr[0] + p), w1 = _mm256_loadu_ps(wr[1] + p),
                     w2 = _mm256_loadu_ps(wr[2] + p), w3 = _mm256_loadu_ps(wr[3] + p);
        a00 = _mm256_fmadd_ps(w0, xv0, a00);
        a01 = _mm256_fmadd_ps(w1, xv0, a01);
        a02 = _mm256_fmadd_ps(w2, xv0, a02);
        a03 = _mm256_fmadd_ps(w3, xv0, a03);
        a10 = _mm256_fmadd_ps(w0, xv1, a10);
        a11 = _mm256_fmadd_ps(w1, xv1, a11);
        a12 = _mm256_fmadd_ps(w2, xv1, a12);
        a13 = _mm256_fmadd_ps(w3, xv1, a13);
      }
      Store4(out + i * n + j, a00, a01, a02, a03, x0, wr, k8, k);
      Store4(out + (i + 1) * n + j, a10, a11, a12, a13, x1, wr, k8, k);
    }
    for (; i < m; ++i) {
      const float* xr = x + i * k;
      __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), a2 = _mm256_setzero_ps(),
             a3 = _mm256_setzero_ps();
      for (int64_t p = 0; p < k8; p += 8) {
        const __m256 xv = _mm256_loadu_ps(xr + p);
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(wr[0] + p), xv, a0);
        a1 = _mm256_fmadd_ps(_mm256_loadu_ps(wr[1] + p), xv, a1);
        a2 = _mm256_fmadd_ps(_mm256_loadu_ps(wr[2] + p), xv, a2);
        a3 = _mm256_fmadd_ps(_mm256_loadu_ps(wr[3] + p), xv, a3);
      }
      Store4(out + i * n + j, a0, a1, a2, a3, xr, wr, k8, k);
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
  const bool skinny = path == GemmPath::kAuto ? m <= kSkinnyMaxM && m * k * 4 <= kSkinnyMaxXBytes
                                              : path == GemmPath::kSkinny;
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
