// GemmSplit (kernels/cpu/gemm/gemm.cc, Backend::GemmSplit): one GEMM whose output columns go to
// several tensors, as the runner's fused q/k/v projection. Each part must equal a float64
// reference of x against its own rows of w, for every path (AMX where it runs; elsewhere it is
// refused), kernel level and weight dtype,
// with part widths that are not multiples of the kernels' row blocks (16) or panels (32), so
// chunks that span two parts are exercised; through the backend it is one op with the whole
// GEMM's cost; bad outs are refused with errors that name the op.
#include <memory>
#include <numeric>
#include <vector>

#include "absl/strings/match.h"
#include "kernels/cpu/gemm/gemm_planner.h"
#include "kernels/cpu/ops.h"
#include "kernels/half_float.h"
#include "tests/kernels/cpu/cpu_test_util.h"

namespace saturn::testing {
namespace {

constexpr double kTol = 1e-5;

// x [m, k] against rows [row0, row0 + n) of w [*, k], in float64.
std::vector<double> PartReference(const std::vector<float>& x, const std::vector<float>& w, int m,
                                  int k, int row0, int n) {
  std::vector<double> ref(static_cast<size_t>(m) * n);
  for (int i = 0; i < m; ++i) {
    for (int j = 0; j < n; ++j) {
      double s = 0;
      for (int l = 0; l < k; ++l)
        s += static_cast<double>(x[i * k + l]) * w[static_cast<size_t>(row0 + j) * k + l];
      ref[static_cast<size_t>(i) * n + j] = s;
    }
  }
  return ref;
}

struct SplitCase {
  int m, k;
  std::vector<int> parts;  // output widths, in order
};
const SplitCase kCases[] = {
    {1, 64, {40, 17, 24}},    // decode: chunks of 16 rows cross both part boundaries
    {1, 129, {32, 16, 16}},   // odd k (k tails), boundaries on whole groups
    {5, 96, {70, 9, 33}},     // several rows: the skinny kernel's input-row tiles
    {40, 77, {33, 64, 31}},   // blocked panels of 32 crossing parts, odd k
    {13, 300, {100, 20, 20}}  // k past one blocked k block (256)
};

class CpuGemmSplitPathTest : public ::testing::TestWithParam<cpu::GemmPath> {};

TEST_P(CpuGemmSplitPathTest, EachPartEqualsItsOwnRowsOfW) {
  std::mt19937 rng(11);
  for (cpu::Isa isa : SupportedIsas()) {
    for (const char* dtype : {"f32", "bf16"}) {
      SCOPED_TRACE(std::string(cpu::IsaName(isa)) + " " + dtype);
      std::unique_ptr<Backend> b = MakeCpuIsa(2, isa, dtype);
      const bool bf16 = std::string(dtype) == "bf16";
      cpu::ThreadPool pool(3);  // three threads: chunks land unevenly on the parts
      cpu::GemmPlanner planner;
      for (const SplitCase& c : kCases) {
        const int n = std::accumulate(c.parts.begin(), c.parts.end(), 0);
        std::vector<float> x = Random(rng, c.m * c.k), w = Random(rng, n * c.k);
        DevTensor dx = F32(*b, c.m, c.k, x);
        DevTensor dw = Empty(*b, bf16 ? DType::kBF16 : DType::kF32, n, c.k);
        ASSERT_TRUE(b->UploadF32(w.data(), dw.t).ok());
        if (bf16) {  // what the device holds, and what every path multiplies x as
          for (float& v : w) v = Bf16ToF32(F32ToBf16(v));
          for (float& v : x) v = Bf16ToF32(F32ToBf16(v));
        }
        std::vector<DevTensor> outs;
        std::vector<Tensor> views;
        for (int cols : c.parts) {
          outs.push_back(Poisoned(*b, c.m, cols));
          views.push_back(outs.back().t);
        }
        const absl::Status st =
            cpu::GemmSplit(pool, cpu::KernelsFor(isa), &planner, dx.t, dw.t, views, GetParam());
        if (cpu::IsAmx(GetParam()) && !cpu::AmxRuns(isa, dw.t.dtype)) {
          EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
          continue;  // AMX is refused where it cannot run
        }
        ASSERT_TRUE(st.ok()) << st;
        int row0 = 0;
        for (size_t p = 0; p < c.parts.size(); ++p) {
          EXPECT_LT(
              RelErr(ToHost<float>(*b, views[p]), PartReference(x, w, c.m, c.k, row0, c.parts[p])),
              kTol)
              << c.m << "x" << n << "x" << c.k << " part " << p;
          row0 += c.parts[p];
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Paths, CpuGemmSplitPathTest,
                         ::testing::Values(cpu::GemmPath::kSkinny, cpu::GemmPath::kBlocked,
                                           cpu::GemmPath::kBlas, cpu::GemmPath::kAmx,
                                           cpu::GemmPath::kAmxStream, cpu::GemmPath::kAuto),
                         [](const ::testing::TestParamInfo<cpu::GemmPath>& info) {
                           return std::string(cpu::GemmPathName(info.param));
                         });

TEST(CpuGemmSplitTest, BackendRecordsOneGemmOpWithTheWholeCost) {
  std::unique_ptr<Backend> b = MakeCpu(2);
  std::mt19937 rng(3);
  const int m = 2, k = 48, n1 = 40, n2 = 8;
  DevTensor x = F32(*b, m, k, Random(rng, m * k)),
            w = F32(*b, n1 + n2, k, Random(rng, (n1 + n2) * k));
  DevTensor o1 = Poisoned(*b, m, n1), o2 = Poisoned(*b, m, n2), whole = Poisoned(*b, m, n1 + n2);
  b->BeginStep(true);
  const Tensor outs[] = {o1.t, o2.t};
  ASSERT_TRUE(b->GemmSplit(x.t, w.t, outs).ok());
  absl::StatusOr<StepTiming> t = b->EndStep();
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_EQ(t->ops.size(), 1u);
  EXPECT_EQ(t->ops[0].kind, OpKind::kGemm);
  EXPECT_DOUBLE_EQ(t->ops[0].cost.flops, 2.0 * m * (n1 + n2) * k);
  // x read once, all of w, both outputs written: the bytes of one GEMM into [m, n1 + n2].
  EXPECT_DOUBLE_EQ(t->ops[0].cost.bytes, 4.0 * (m * k + (n1 + n2) * k + m * (n1 + n2)));
  // And the parts are the whole GEMM's columns.
  ASSERT_TRUE(b->Gemm(x.t, w.t, whole.t).ok());
  const std::vector<float> all = ToHost<float>(*b, whole.t), a = ToHost<float>(*b, o1.t),
                           c = ToHost<float>(*b, o2.t);
  for (int i = 0; i < m; ++i) {
    for (int j = 0; j < n1 + n2; ++j) {
      const float part = j < n1 ? a[i * n1 + j] : c[i * n2 + j - n1];
      EXPECT_FLOAT_EQ(part, all[i * (n1 + n2) + j]) << i << "," << j;
    }
  }
}

TEST(CpuGemmSplitTest, BadOutsAreRefusedByName) {
  std::unique_ptr<Backend> b = MakeCpu(1);
  DevTensor x = Empty(*b, DType::kF32, 2, 8), w = Empty(*b, DType::kF32, 12, 8);
  DevTensor o4 = Empty(*b, DType::kF32, 2, 4), o8 = Empty(*b, DType::kF32, 2, 8),
            wrong_rows = Empty(*b, DType::kF32, 3, 8);
  auto split = [&](const std::vector<Tensor>& outs) { return b->GemmSplit(x.t, w.t, outs); };
  const absl::Status sum = split({o4.t, o4.t});  // 8 columns for 12 rows of w
  EXPECT_EQ(sum.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(sum.message(), "gemm_split")) << sum;
  EXPECT_TRUE(absl::StrContains(sum.message(), "sum to 8")) << sum;
  const absl::Status rows = split({o4.t, wrong_rows.t});
  EXPECT_EQ(rows.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(rows.message(), "2 rows")) << rows;
  EXPECT_EQ(split({}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(split({o4.t, o8.t}).ok());
}

}  // namespace
}  // namespace saturn::testing
