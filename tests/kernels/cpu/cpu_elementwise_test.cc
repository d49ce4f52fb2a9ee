// CPU Add, GatherRows and Copy (kernels/cpu/elementwise.cc) at one row and many, including a
// copy large enough to be split over the pool, and a gather index outside x naming the op.
#include "absl/strings/match.h"
#include "tests/kernels/cpu/cpu_test_util.h"

namespace saturn::testing {
namespace {

constexpr std::pair<int, int> kShapes[] = {{1, 11}, {6, 300}, {70, 512}};  // rows, width

class CpuElementwiseTest : public CpuOpTest {};

TEST_P(CpuElementwiseTest, Add) {
  for (auto [rows, f] : kShapes) {
    std::vector<float> a = Random(rng_, rows * f), c = Random(rng_, rows * f);
    DevTensor da = F32(*b_, rows, f, a), dc = F32(*b_, rows, f, c), sum = Poisoned(*b_, rows, f);
    ASSERT_TRUE(b_->Add(da.t, dc.t, sum.t).ok());
    std::vector<double> rsum(rows * f);
    for (int i = 0; i < rows * f; ++i) rsum[i] = static_cast<double>(a[i]) + c[i];
    EXPECT_LT(RelErr(ToHost<float>(*b_, sum.t), rsum), kTol) << rows << "x" << f;
  }
}

TEST_P(CpuElementwiseTest, GatherRows) {
  for (auto [rows, f] : kShapes) {
    std::vector<float> a = Random(rng_, rows * f);
    DevTensor da = F32(*b_, rows, f, a);
    std::vector<int32_t> idx = {rows - 1, 0, rows / 2, rows - 1};
    DevTensor di = I32(*b_, 1, idx.size(), idx), g = Poisoned(*b_, idx.size(), f);
    ASSERT_TRUE(b_->GatherRows(da.t, di.t, g.t).ok());
    std::vector<double> rg;
    for (int32_t i : idx) rg.insert(rg.end(), a.begin() + i * f, a.begin() + (i + 1) * f);
    EXPECT_LT(RelErr(ToHost<float>(*b_, g.t), rg), kTol) << rows << "x" << f;
  }
  DevTensor x = F32(*b_, 3, 2, {1, 2, 3, 4, 5, 6}), out = Poisoned(*b_, 1, 2);
  DevTensor bad = I32(*b_, 1, 1, {3});
  absl::Status s = b_->GatherRows(x.t, bad.t, out.t);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(s.message(), "gather_rows")) << s;
}

TEST_P(CpuElementwiseTest, Copy) {
  for (auto [rows, f] : kShapes) {
    std::vector<float> a = Random(rng_, rows * f);
    DevTensor da = F32(*b_, rows, f, a), cp = Poisoned(*b_, rows, f);
    ASSERT_TRUE(b_->Copy(da.t, cp.t).ok());
    EXPECT_EQ(ToHost<float>(*b_, cp.t), a) << rows << "x" << f;
  }
}

TEST_P(CpuElementwiseTest, LargeCopyUsesAllChunks) {
  const int64_t n = (1 << 20) + 3;  // big enough to be split across the pool
  std::vector<float> src = Random(rng_, n);
  DevTensor ds = F32(*b_, 1, n, src), dd = Poisoned(*b_, 1, n);
  ASSERT_TRUE(b_->Copy(ds.t, dd.t).ok());
  EXPECT_EQ(ToHost<float>(*b_, dd.t), src);
}

INSTANTIATE_TEST_SUITE_P(Threads, CpuElementwiseTest, ::testing::Values(1, 3), ThreadsName);

}  // namespace
}  // namespace saturn::testing
