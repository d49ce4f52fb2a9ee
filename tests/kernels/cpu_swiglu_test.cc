// CPU SwiGLU (kernels/cpu/swiglu.cc): silu(gate) * up against a float64 reference at one row
// and many, odd and even widths, and the shape error naming the op.
#include <cmath>

#include "absl/strings/match.h"
#include "tests/kernels/cpu_test_util.h"

namespace saturn::testing {
namespace {

class CpuSwiGluTest : public CpuOpTest {};

TEST_P(CpuSwiGluTest, SwiGlu) {
  for (auto [rows, f] : {std::pair{1, 11}, std::pair{6, 300}, std::pair{70, 512}}) {
    std::vector<float> gu = Random(rng_, rows * 2 * f, -4, 4);
    DevTensor dgu = F32(*b_, rows, 2 * f, gu), out = Poisoned(*b_, rows, f);
    ASSERT_TRUE(b_->SwiGlu(dgu.t, out.t).ok());
    std::vector<double> ref(rows * f);
    for (int r = 0; r < rows; ++r) {
      for (int j = 0; j < f; ++j) {
        const double g = gu[r * 2 * f + j], u = gu[r * 2 * f + f + j];
        ref[r * f + j] = g / (1 + std::exp(-g)) * u;
      }
    }
    EXPECT_LT(RelErr(ToHost<float>(*b_, out.t), ref), kTol) << rows << "x" << f;
  }
}

INSTANTIATE_TEST_SUITE_P(Threads, CpuSwiGluTest, ::testing::Values(1, 3), ThreadsName);

TEST(CpuSwiGluErrors, ShapeErrorNamesTheOp) {
  std::unique_ptr<Backend> b = MakeCpu(1);
  DevTensor odd = Empty(*b, DType::kF32, 2, 6), o2 = Empty(*b, DType::kF32, 2, 4);
  absl::Status s = b->SwiGlu(odd.t, o2.t);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(s.message(), "swiglu")) << s;
}

}  // namespace
}  // namespace saturn::testing
