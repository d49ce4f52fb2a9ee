// CPU Embedding (kernels/cpu/embedding.cc): the rows of the ids, repeats and the last id
// included, and an id past the vocabulary is InvalidArgument naming the op and the id.
#include <algorithm>

#include "absl/strings/match.h"
#include "kernels/cpu/cpu_features.h"
#include "tests/kernels/cpu/cpu_test_util.h"

namespace saturn::testing {
namespace {

class CpuEmbeddingTest : public CpuOpTest {};

TEST_P(CpuEmbeddingTest, Embedding) {
  const int vocab = 37, d = 19;
  std::vector<float> table = Random(rng_, vocab * d);
  std::vector<int32_t> ids = {0, 36, 5, 5, 17, 2, 36};
  DevTensor dt = F32(*b_, vocab, d, table), di = I32(*b_, 1, ids.size(), ids);
  DevTensor out = Poisoned(*b_, ids.size(), d);
  ASSERT_TRUE(b_->Embedding(di.t, dt.t, out.t).ok());
  std::vector<double> ref;
  for (int32_t id : ids)
    ref.insert(ref.end(), table.begin() + id * d, table.begin() + (id + 1) * d);
  EXPECT_LT(RelErr(ToHost<float>(*b_, out.t), ref), kTol);

  std::vector<int32_t> bad = {3, 37};
  DevTensor dbad = I32(*b_, 1, 2, bad);
  DevTensor out2 = Poisoned(*b_, 2, d);
  absl::Status s = b_->Embedding(dbad.t, dt.t, out2.t);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(s.message(), "embedding")) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "37")) << s;
}

// A table in 32-row panels (the CPU backend's f32 GEMM weights at the AVX-512 level, which a
// tied LM head shares with the embedding) gives the same rows, past a partial last panel too.
TEST_P(CpuEmbeddingTest, EmbeddingFromPanels) {
  const int vocab = 70, d = 19;
  std::vector<float> table = Random(rng_, vocab * d);
  std::vector<int32_t> ids = {0, 69, 31, 32, 5, 64, 33};
  std::unique_ptr<Backend> b = MakeCpuIsa(GetParam(), cpu::BestIsa());
  const Layout layout = b->GemmWeightLayout(DType::kF32);
  if (layout != Layout::kPanels) {
    GTEST_SKIP() << "f32 weights stay row-major below the AVX-512 kernel level";
  }
  DevTensor dt = Empty(*b, DType::kF32, vocab, d, layout);
  ASSERT_TRUE(b->UploadF32(table.data(), dt.t).ok());
  DevTensor di = I32(*b, 1, ids.size(), ids), out = Poisoned(*b, ids.size(), d);
  ASSERT_TRUE(b->Embedding(di.t, dt.t, out.t).ok());
  const std::vector<float> got = ToHost<float>(*b, out.t);
  for (size_t t = 0; t < ids.size(); ++t) {
    ASSERT_TRUE(
        std::equal(got.begin() + t * d, got.begin() + (t + 1) * d, table.begin() + ids[t] * d))
        << "id " << ids[t];
  }
}

INSTANTIATE_TEST_SUITE_P(Threads, CpuEmbeddingTest, ::testing::Values(1, 3), ThreadsName);

}  // namespace
}  // namespace saturn::testing
