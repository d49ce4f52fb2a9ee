// Sampling on CUDA against the CPU twin on identical f32 logits: greedy equality (ties go to
// the lower index), and the same token for the same seed and step under temperature, top-k
// and top-p, with logits spread far enough apart that rounding cannot reorder them.
#include <gtest/gtest.h>

#include <random>
#include <set>

#include "tests/cuda/cuda_test_util.h"

namespace saturn {
namespace {

using testing::DevTensor;
using testing::RawTensor;
using testing::ReadRaw;

struct Row {
  float temperature;
  int top_k;
  float top_p;
  int64_t seed;
  int step;
};

std::vector<int32_t> SampleOn(Backend* b, const std::vector<float>& logits, int vocab,
                              const std::vector<Row>& rows) {
  const int n = static_cast<int>(rows.size());
  std::vector<float> temp, top_p;
  std::vector<int32_t> top_k, step;
  std::vector<int64_t> seed;
  for (const Row& r : rows) {
    temp.push_back(r.temperature);
    top_k.push_back(r.top_k);
    top_p.push_back(r.top_p);
    seed.push_back(r.seed);
    step.push_back(r.step);
  }
  DevTensor dl = RawTensor(b, DType::kF32, n, vocab, logits);
  DevTensor dt = RawTensor(b, DType::kF32, 1, n, temp), dk = RawTensor(b, DType::kI32, 1, n, top_k),
            dp = RawTensor(b, DType::kF32, 1, n, top_p), ds = RawTensor(b, DType::kI64, 1, n, seed),
            dst = RawTensor(b, DType::kI32, 1, n, step),
            tokens = RawTensor(b, DType::kI32, 1, n, std::vector<int32_t>(n, -7));
  absl::Status s = b->Sample(dl.t, SamplingBatch{dt.t, dk.t, dp.t, ds.t, dst.t}, tokens.t);
  EXPECT_TRUE(s.ok()) << b->name() << ": " << s;
  return ReadRaw<int32_t>(b, tokens.t);
}

// Distinct logits on a grid of spacing 0.01 (shuffled), so p differs by >= 1% between tokens.
std::vector<float> SpreadLogits(int rows, int vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<float> out;
  for (int r = 0; r < rows; ++r) {
    std::vector<float> row(vocab);
    for (int i = 0; i < vocab; ++i)
      row[i] =
          -5.0f + 0.01f * static_cast<float>(i % 1000) + 0.0001f * static_cast<float>(i / 1000);
    std::shuffle(row.begin(), row.end(), rng);
    out.insert(out.end(), row.begin(), row.end());
  }
  return out;
}

TEST(CudaSamplingTest, GreedyMatchesCpuIncludingTies) {
  SATURN_REQUIRE_CUDA(gpu);
  auto cpu = CreateBackend("cpu", 2);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  for (int vocab : {7, 4096, 32000, 128256}) {
    SCOPED_TRACE(vocab);
    std::vector<float> logits = SpreadLogits(4, vocab, 5);
    // Row 3: a tie for the maximum between two positions; the lower index must win.
    const float big = 100.0f;
    logits[3 * vocab + vocab / 2] = big;
    logits[3 * vocab + vocab - 1] = big;
    std::vector<Row> rows(4, Row{0.0f, 0, 1.0f, 1, 0});
    rows[1].temperature = -1.0f;  // <= 0 is greedy too
    const auto want = SampleOn(cpu->get(), logits, vocab, rows);
    const auto got = SampleOn(gpu.get(), logits, vocab, rows);
    EXPECT_EQ(got, want);
    EXPECT_EQ(got[3], vocab / 2);
  }
}

TEST(CudaSamplingTest, SameSeedSameTokenAsCpu) {
  SATURN_REQUIRE_CUDA(gpu);
  auto cpu = CreateBackend("cpu", 2);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  for (int vocab : {50, 4096, 32000}) {
    SCOPED_TRACE(vocab);
    std::vector<Row> rows;
    for (int i = 0; i < 48; ++i) {
      const float temps[] = {0.5f, 1.0f, 1.5f};
      const int ks[] = {0, 1, 5, 40};
      const float ps[] = {1.0f, 0.9f, 0.5f, 0.05f};
      rows.push_back(Row{temps[i % 3], ks[(i / 3) % 4], ps[(i / 12) % 4], 1000 + i, i % 7});
    }
    const auto logits = SpreadLogits(static_cast<int>(rows.size()), vocab, 9);
    const auto want = SampleOn(cpu->get(), logits, vocab, rows);
    const auto got = SampleOn(gpu.get(), logits, vocab, rows);
    EXPECT_EQ(got, want);
    for (size_t i = 0; i < rows.size(); ++i) {
      if (rows[i].top_k == 1) {
        EXPECT_EQ(got[i], SampleOn(gpu.get(),
                                   std::vector<float>(logits.begin() + i * vocab,
                                                      logits.begin() + (i + 1) * vocab),
                                   vocab, {Row{0.0f, 0, 1.0f, 0, 0}})[0]);
      }
    }
  }
}

TEST(CudaSamplingTest, SeedsChangeTheDrawAndStayInRange) {
  SATURN_REQUIRE_CUDA(gpu);
  const int vocab = 1000;
  std::vector<Row> rows;
  for (int i = 0; i < 64; ++i) rows.push_back(Row{1.0f, 0, 1.0f, i, 0});
  const auto logits = std::vector<float>(rows.size() * vocab, 0.0f);  // uniform distribution
  const auto got = SampleOn(gpu.get(), logits, vocab, rows);
  std::set<int> distinct(got.begin(), got.end());
  EXPECT_GT(distinct.size(), 40u);
  for (int t : got) {
    EXPECT_GE(t, 0);
    EXPECT_LT(t, vocab);
  }
}

}  // namespace
}  // namespace saturn
