// CPU Embedding (kernels/cpu/embedding.cc): the rows of the ids, repeats and the last id
// included, and an id past the vocabulary is InvalidArgument naming the op and the id.
#include "absl/strings/match.h"
#include "tests/kernels/cpu_test_util.h"

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

INSTANTIATE_TEST_SUITE_P(Threads, CpuEmbeddingTest, ::testing::Values(1, 3), ThreadsName);

}  // namespace
}  // namespace saturn::testing
