// CPU RmsNorm and AddRmsNorm (kernels/cpu/rms_norm.cc) against a float64 reference on random
// data at several row counts and widths, and the shape error naming the op.
#include <cmath>

#include "absl/strings/match.h"
#include "tests/kernels/cpu/cpu_test_util.h"

namespace saturn::testing {
namespace {

std::vector<double> RefRmsNorm(const std::vector<double>& x, const std::vector<float>& w, int rows,
                               int d, double eps) {
  std::vector<double> out(x.size());
  for (int r = 0; r < rows; ++r) {
    double ss = 0;
    for (int j = 0; j < d; ++j) ss += x[r * d + j] * x[r * d + j];
    const double inv = 1.0 / std::sqrt(ss / d + eps);
    for (int j = 0; j < d; ++j) out[r * d + j] = x[r * d + j] * inv * w[j];
  }
  return out;
}

constexpr std::pair<int, int> kShapes[] = {{1, 768}, {7, 13}, {40, 1000}};  // rows, width
constexpr float kEps = 1e-5f;

class CpuRmsNormTest : public CpuOpTest {};

TEST_P(CpuRmsNormTest, RmsNorm) {
  for (auto [rows, d] : kShapes) {
    std::vector<float> x = Random(rng_, rows * d, -2, 2), w = Random(rng_, d, 0.5, 1.5);
    DevTensor dx = F32(*b_, rows, d, x), dw = F32(*b_, 1, d, w), out = Poisoned(*b_, rows, d);
    ASSERT_TRUE(b_->RmsNorm(dx.t, dw.t, kEps, out.t).ok());
    EXPECT_LT(RelErr(ToHost<float>(*b_, out.t),
                     RefRmsNorm(std::vector<double>(x.begin(), x.end()), w, rows, d, kEps)),
              kTol)
        << rows << "x" << d;
  }
}

// The residual becomes x + residual, and the output is the norm of that sum.
TEST_P(CpuRmsNormTest, AddRmsNorm) {
  for (auto [rows, d] : kShapes) {
    std::vector<float> x = Random(rng_, rows * d, -2, 2), res = Random(rng_, rows * d, -2, 2),
                       w = Random(rng_, d, 0.5, 1.5);
    DevTensor dx = F32(*b_, rows, d, x), dw = F32(*b_, 1, d, w), dres = F32(*b_, rows, d, res);
    DevTensor out = Poisoned(*b_, rows, d);
    ASSERT_TRUE(b_->AddRmsNorm(dx.t, dres.t, dw.t, kEps, out.t).ok());
    std::vector<double> sum(rows * d);
    for (int i = 0; i < rows * d; ++i) sum[i] = static_cast<double>(x[i]) + res[i];
    EXPECT_LT(RelErr(ToHost<float>(*b_, dres.t), sum), kTol) << rows << "x" << d;
    EXPECT_LT(RelErr(ToHost<float>(*b_, out.t), RefRmsNorm(sum, w, rows, d, kEps)), kTol)
        << rows << "x" << d;
  }
}

INSTANTIATE_TEST_SUITE_P(Threads, CpuRmsNormTest, ::testing::Values(1, 3), ThreadsName);

TEST(CpuRmsNormErrors, ShapeErrorNamesTheOp) {
  std::unique_ptr<Backend> b = MakeCpu(1);
  DevTensor x = Empty(*b, DType::kF32, 2, 4), wn = Empty(*b, DType::kF32, 1, 5);
  absl::Status s = b->RmsNorm(x.t, wn.t, 1e-5f, x.t);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(s.message(), "rms_norm")) << s;
}

}  // namespace
}  // namespace saturn::testing
