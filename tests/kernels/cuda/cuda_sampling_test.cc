// Sampling on CUDA against the CPU twin on identical f32 logits: greedy equality (ties go to
// the lower index), and the same token for the same seed and step under temperature, top-k
// and top-p: on spread logits, on LM-like random rows, on exact ties at top-p boundaries and
// on rows holding -0.0 and +0.0 (the host emulation, tests/kernels/cuda/cuda_sample_search_test.cc,
// checks the same arithmetic without a device).
#include <gtest/gtest.h>

#include <random>
#include <set>

#include "tests/kernels/cuda/cuda_test_util.h"
#include "tests/kernels/sampling_test_util.h"

namespace saturn::testing {
namespace {

using testing::LmLikeLogits;
using testing::MixedRows;
using testing::SampleOn;
using Row = SamplingRow;

// Distinct logits on a grid of spacing 0.01 (shuffled), so p differs by >= 1% between tokens.
std::vector<float> SpreadLogits(int rows, int vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<float> out;
  for (int r = 0; r < rows; ++r) {
    std::vector<float> row(vocab);
    for (int i = 0; i < vocab; ++i) {
      const int step = i % 1000, thousand = i / 1000;  // integer buckets of the grid
      row[i] = -5.0f + 0.01f * static_cast<float>(step) + 0.0001f * static_cast<float>(thousand);
    }
    std::shuffle(row.begin(), row.end(), rng);
    out.insert(out.end(), row.begin(), row.end());
  }
  return out;
}

TEST(CudaSamplingTest, GreedyMatchesCpuIncludingTies) {
  SATURN_REQUIRE_CUDA(gpu);
  auto cpu = CreateBackend("cpu", 2, "f32");
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
    const auto want = SampleOn(**cpu, logits, vocab, rows);
    const auto got = SampleOn(*gpu, logits, vocab, rows);
    EXPECT_EQ(got, want);
    EXPECT_EQ(got[3], vocab / 2);
  }
}

TEST(CudaSamplingTest, SameSeedSameTokenAsCpu) {
  SATURN_REQUIRE_CUDA(gpu);
  auto cpu = CreateBackend("cpu", 2, "f32");
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
    const auto want = SampleOn(**cpu, logits, vocab, rows);
    const auto got = SampleOn(*gpu, logits, vocab, rows);
    EXPECT_EQ(got, want);
    for (size_t i = 0; i < rows.size(); ++i) {
      if (rows[i].top_k == 1) {
        EXPECT_EQ(got[i], SampleOn(*gpu,
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
  rows.reserve(64);
  for (int i = 0; i < 64; ++i) rows.push_back(Row{1.0f, 0, 1.0f, i, 0});
  const auto logits = std::vector<float>(rows.size() * vocab, 0.0f);  // uniform distribution
  const auto got = SampleOn(*gpu, logits, vocab, rows);
  std::set<int> distinct(got.begin(), got.end());
  EXPECT_GT(distinct.size(), 40u);
  for (int t : got) {
    EXPECT_GE(t, 0);
    EXPECT_LT(t, vocab);
  }
}

// Peaked rows (a few large logits over a Gaussian floor): p is not spread, so u often lands
// within a float ulp of a CDF boundary; only double accumulation agrees with the CPU there.
TEST(CudaSamplingTest, LmLikeRowsSameTokenAsCpu) {
  SATURN_REQUIRE_CUDA(gpu);
  auto cpu = CreateBackend("cpu", 2, "f32");
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  const int vocab = 32000, n = 256;
  std::mt19937 rng(7);
  const std::vector<float> logits = LmLikeLogits(rng, n, vocab);
  const std::vector<Row> rows = MixedRows(n, 5000);
  EXPECT_EQ(SampleOn(*gpu, logits, vocab, rows), SampleOn(**cpu, logits, vocab, rows));
}

// Five equal maxima under top_k = 5: the prefix mass meets 0.2, 0.4, ... exactly at top_p;
// and -0.0 / +0.0 in one row rank as equal (lower index first), as on the CPU.
TEST(CudaSamplingTest, ExactTiesAndSignedZerosSameTokenAsCpu) {
  SATURN_REQUIRE_CUDA(gpu);
  auto cpu = CreateBackend("cpu", 2, "f32");
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  const int vocab = 64;
  std::vector<float> row(vocab, -3.0f);
  for (int i : {3, 9, 17, 40, 63}) row[i] = 2.0f;
  row[20] = -0.0f;
  row[21] = 0.0f;
  std::vector<Row> rows;
  for (float p : {0.2f, 0.4f, 0.6f, 0.8f, 1.0f}) {
    for (int s = 0; s < 40; ++s) rows.push_back(Row{1.0f, 5, p, 77 + s, s});
  }
  std::vector<float> zeros(vocab, -9.0f);
  zeros[1] = -0.0f;
  zeros[2] = 0.0f;
  for (int k : {1, 2}) {
    for (int s = 0; s < 8; ++s) rows.push_back(Row{1.0f, k, 1.0f, s, 0});
  }
  std::vector<float> logits;
  for (size_t i = 0; i < rows.size(); ++i) {
    const auto& src = i < 200 ? row : zeros;
    logits.insert(logits.end(), src.begin(), src.end());
  }
  const auto got = SampleOn(*gpu, logits, vocab, rows);
  EXPECT_EQ(got, SampleOn(**cpu, logits, vocab, rows));
  EXPECT_EQ(got[200], 1);  // top_k = 1 keeps -0.0 at index 1, not +0.0 at index 2
}

}  // namespace
}  // namespace saturn::testing
