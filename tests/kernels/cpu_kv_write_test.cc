// CPU KvWrite (kernels/cpu/kv_write.cc): k and v rows land in their scattered cache slots
// (first and last slot included) and nowhere else; a slot outside the cache is
// InvalidArgument naming the op.
#include "absl/strings/match.h"
#include "tests/kernels/cpu_test_util.h"

namespace saturn::testing {
namespace {

class CpuKvWriteTest : public CpuOpTest {};

TEST_P(CpuKvWriteTest, KvWrite) {
  const int cache_rows = 48, width = 24, t = 5;
  std::vector<float> k = Random(rng_, t * width), v = Random(rng_, t * width);
  std::vector<float> kc = Random(rng_, cache_rows * width), vc = Random(rng_, cache_rows * width);
  std::vector<int32_t> slots = {47, 0, 13, 14, 30};
  DevTensor dk = F32(*b_, t, width, k), dv = F32(*b_, t, width, v);
  DevTensor dkc = F32(*b_, cache_rows, width, kc), dvc = F32(*b_, cache_rows, width, vc);
  DevTensor ds = I32(*b_, 1, t, slots);
  ASSERT_TRUE(b_->KvWrite(dk.t, dv.t, ds.t, dkc.t, dvc.t).ok());
  for (int i = 0; i < t; ++i) {
    std::copy(k.begin() + i * width, k.begin() + (i + 1) * width, kc.begin() + slots[i] * width);
    std::copy(v.begin() + i * width, v.begin() + (i + 1) * width, vc.begin() + slots[i] * width);
  }
  EXPECT_EQ(ToHost<float>(*b_, dkc.t), kc);
  EXPECT_EQ(ToHost<float>(*b_, dvc.t), vc);

  for (int32_t bad : {48, -1}) {
    DevTensor dbad = I32(*b_, 1, t, {1, 2, bad, 3, 4});
    absl::Status s = b_->KvWrite(dk.t, dv.t, dbad.t, dkc.t, dvc.t);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(absl::StrContains(s.message(), "kv_write")) << s;
  }
}

INSTANTIATE_TEST_SUITE_P(Threads, CpuKvWriteTest, ::testing::Values(1, 3), ThreadsName);

}  // namespace
}  // namespace saturn::testing
