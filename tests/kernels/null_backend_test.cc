// The null backend records every op with its cost and runs none: what saturn-bench-host relies
// on to time the host path alone.
#include "kernels/null_backend.h"

#include <gtest/gtest.h>

#include <vector>

#include "kernels/backend.h"

namespace saturn {
namespace {

TEST(NullBackendTest, RecordsOpsWithTheirCostButRunsNone) {
  absl::StatusOr<std::unique_ptr<Backend>> b = CreateBackend("null");
  ASSERT_TRUE(b.ok()) << b.status();
  Backend& null = **b;
  EXPECT_EQ(null.name(), "null");
  absl::StatusOr<DeviceBuffer> xb = null.Allocate(4 * 8), wb = null.Allocate(4 * 8 * 8),
                               ob = null.Allocate(4 * 8);
  ASSERT_TRUE(xb.ok() && wb.ok() && ob.ok());
  const Tensor x = xb->View(DType::kF32, 1, 8), w = wb->View(DType::kF32, 8, 8),
               o = ob->View(DType::kF32, 1, 8);
  const std::vector<float> ones(8, 1.0f), sentinel(8, -7.0f);
  ASSERT_TRUE(null.Upload(ones.data(), x).ok());
  ASSERT_TRUE(null.Upload(sentinel.data(), o).ok());
  null.BeginStep(true);
  ASSERT_TRUE(null.Gemm(x, w, o).ok());
  ASSERT_TRUE(null.Add(x, x, o).ok());
  absl::StatusOr<StepTiming> t = null.EndStep();
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_EQ(t->ops.size(), 2u);
  EXPECT_DOUBLE_EQ(t->ops[0].cost.flops, 2.0 * 8 * 8);  // the cost model, as on any backend
  std::vector<float> got(8);
  ASSERT_TRUE(null.Download(o, got.data()).ok());
  EXPECT_EQ(got, sentinel);  // neither op wrote its output
}

TEST(NullBackendTest, UnknownBackendNamesTheChoices) {
  absl::StatusOr<std::unique_ptr<Backend>> b = CreateBackend("tpu");
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("null"), absl::string_view::npos) << b.status();
}

}  // namespace
}  // namespace saturn
