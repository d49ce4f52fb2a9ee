// CPU KvWrite (kernels/cpu/kv_write.cc): k and v rows land in their scattered cache slots
// (first and last slot included) and nowhere else, as they are in an f32 cache and rounded
// to nearest-even in a bf16 one; a slot outside the cache, or a cache narrower or wider than
// that, is InvalidArgument naming the op.
#include "absl/strings/match.h"
#include "kernels/half_float.h"
#include "tests/kernels/cpu/cpu_test_util.h"

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

TEST_P(CpuKvWriteTest, F32RowsIntoBf16CachesAreRounded) {
  const int cache_rows = 40, width = 20, t = 4;
  std::vector<float> k = Random(rng_, t * width, -3, 3), v = Random(rng_, t * width, -3, 3);
  k[0] = Bf16ToF32(0x3f80) + 0x1p-8f;  // 1 + half an ulp of bf16: a tie, rounds to even (1)
  k[1] = Bf16ToF32(0x3f81) + 0x1p-8f;  // 1.0078125 + half an ulp: rounds up to 0x3f82
  std::vector<uint16_t> kc(cache_rows * width, 0xffff), vc(cache_rows * width, 0xffff);
  std::vector<int32_t> slots = {39, 0, 7, 22};
  DevTensor dk = F32(*b_, t, width, k), dv = F32(*b_, t, width, v);
  DevTensor dkc = FromHost(*b_, DType::kBF16, cache_rows, width, kc);
  DevTensor dvc = FromHost(*b_, DType::kBF16, cache_rows, width, vc);
  DevTensor ds = I32(*b_, 1, t, slots);
  ASSERT_TRUE(b_->KvWrite(dk.t, dv.t, ds.t, dkc.t, dvc.t).ok());
  for (int i = 0; i < t; ++i) {
    for (int c = 0; c < width; ++c) {
      kc[slots[i] * width + c] = F32ToBf16(k[i * width + c]);
      vc[slots[i] * width + c] = F32ToBf16(v[i * width + c]);
    }
  }
  EXPECT_EQ(kc[39 * width], 0x3f80);
  EXPECT_EQ(kc[39 * width + 1], 0x3f82);
  EXPECT_EQ(ToHost<uint16_t>(*b_, dkc.t), kc);
  EXPECT_EQ(ToHost<uint16_t>(*b_, dvc.t), vc);

  // bf16 rows into an f32 cache, or caches of two dtypes: refused, nothing written.
  DevTensor fkc = F32(*b_, cache_rows, width, std::vector<float>(cache_rows * width, 0.0f));
  absl::Status s = b_->KvWrite(dk.t, dv.t, ds.t, fkc.t, dvc.t);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(s.message(), "kv_write")) << s;
  DevTensor hk = FromHost(*b_, DType::kBF16, t, width, std::vector<uint16_t>(t * width, 0x3f80));
  DevTensor hv = FromHost(*b_, DType::kBF16, t, width, std::vector<uint16_t>(t * width, 0x3f80));
  DevTensor fvc = F32(*b_, cache_rows, width, std::vector<float>(cache_rows * width, 0.0f));
  s = b_->KvWrite(hk.t, hv.t, ds.t, fkc.t, fvc.t);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  for (float x : ToHost<float>(*b_, fkc.t)) EXPECT_EQ(x, 0.0f);
}

INSTANTIATE_TEST_SUITE_P(Threads, CpuKvWriteTest, ::testing::Values(1, 3), ThreadsName);

}  // namespace
}  // namespace saturn::testing
