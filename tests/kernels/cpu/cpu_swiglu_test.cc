// CPU SwiGLU (kernels/cpu/swiglu.cc): silu(gate) * up against a float64 reference at one row
// and many, odd and even widths, gates past the exponential's range, at every kernel level the
// CPU runs, and the shape error naming the op.
#include <cmath>
#include <tuple>

#include "absl/strings/match.h"
#include "tests/kernels/cpu/cpu_test_util.h"

namespace saturn::testing {
namespace {

class CpuSwiGluTest : public CpuOpTest {};

TEST_P(CpuSwiGluTest, SwiGlu) {
  for (cpu::Isa isa : SupportedIsas()) {
    SCOPED_TRACE(cpu::IsaName(isa));
    std::unique_ptr<Backend> b = MakeCpuIsa(GetParam(), isa);
    // Gates far past the exponential's range (|g| up to 120) as well as ordinary ones.
    for (auto [rows, f, range] : {std::tuple{1, 11, 4.0f}, std::tuple{6, 300, 4.0f},
                                  std::tuple{70, 512, 4.0f}, std::tuple{3, 37, 120.0f}}) {
      std::vector<float> gu = Random(rng_, rows * 2 * f, -range, range);
      DevTensor dgu = F32(*b, rows, 2 * f, gu), out = Poisoned(*b, rows, f);
      ASSERT_TRUE(b->SwiGlu(dgu.t, out.t).ok());
      std::vector<double> ref(rows * f);
      for (int r = 0; r < rows; ++r) {
        for (int j = 0; j < f; ++j) {
          const double g = gu[r * 2 * f + j], u = gu[r * 2 * f + f + j];
          ref[r * f + j] = g / (1 + std::exp(-g)) * u;
        }
      }
      EXPECT_LT(RelErr(ToHost<float>(*b, out.t), ref), kTol) << rows << "x" << f;
    }
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
