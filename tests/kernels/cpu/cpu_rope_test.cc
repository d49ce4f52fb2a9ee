// CPU RoPE (kernels/cpu/rope.cc) on q and k against a float64 reference: one and many rows,
// GQA head counts, a head_dim of 6 and of 128, theta 1e4 and 5e5, random positions.
#include <cmath>

#include "tests/kernels/cpu/cpu_test_util.h"

namespace saturn::testing {
namespace {

void RefRope(std::vector<double>& x, int rows, int heads, int hd, const std::vector<int32_t>& pos,
             double theta) {
  for (int t = 0; t < rows; ++t) {
    for (int h = 0; h < heads; ++h) {
      double* v = &x[(t * heads + h) * hd];
      for (int i = 0; i < hd / 2; ++i) {
        const double a = pos[t] * std::pow(theta, -2.0 * i / hd);
        const double x1 = v[i], x2 = v[i + hd / 2];
        v[i] = x1 * std::cos(a) - x2 * std::sin(a);
        v[i + hd / 2] = x2 * std::cos(a) + x1 * std::sin(a);
      }
    }
  }
}

class CpuRopeTest : public CpuOpTest {};

TEST_P(CpuRopeTest, Rope) {
  for (auto [rows, hq, hk, hd, theta] :
       {std::tuple{1, 4, 1, 64, 10000.0f}, std::tuple{9, 6, 2, 6, 10000.0f},
        std::tuple{33, 8, 2, 128, 500000.0f}}) {
    std::vector<float> q = Random(rng_, rows * hq * hd), k = Random(rng_, rows * hk * hd);
    std::vector<int32_t> pos(rows);
    for (int t = 0; t < rows; ++t) pos[t] = static_cast<int32_t>(rng_() % 8192);
    DevTensor dq = F32(*b_, rows, hq * hd, q), dk = F32(*b_, rows, hk * hd, k);
    DevTensor dp = I32(*b_, 1, rows, pos);
    ASSERT_TRUE(b_->Rope(dq.t, dk.t, dp.t, hd, theta).ok());
    std::vector<double> rq(q.begin(), q.end()), rk(k.begin(), k.end());
    RefRope(rq, rows, hq, hd, pos, theta);
    RefRope(rk, rows, hk, hd, pos, theta);
    EXPECT_LT(RelErr(ToHost<float>(*b_, dq.t), rq), kTol) << rows << " " << hd;
    EXPECT_LT(RelErr(ToHost<float>(*b_, dk.t), rk), kTol) << rows << " " << hd;
  }
}

INSTANTIATE_TEST_SUITE_P(Threads, CpuRopeTest, ::testing::Values(1, 3), ThreadsName);

}  // namespace
}  // namespace saturn::testing
