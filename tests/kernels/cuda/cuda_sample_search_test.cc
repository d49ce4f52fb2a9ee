// The device sampler's arithmetic (kernels/cuda/sample_search.h), run on the host in the
// kernel's thread partition and summation order (EmulatedBlock), picks the same token as
// the CPU sampler on every row: random rows at vocabulary 4096 and 32000 with temperature,
// top-k and top-p, rows of exact ties at top-p boundaries, tie-heavy random rows, greedy rows
// (one block, and v2's vocabulary splits merged in split order) and rows holding both -0.0 and
// +0.0. Needs no GPU: it is the same code the kernel runs.
#include <memory>
#include <random>
#include <vector>

#include "kernels/cuda/sample_search.h"
#include "tests/kernels/sampling_test_util.h"

namespace saturn::testing {
namespace {

namespace ss = saturn::sample_search;

using Row = SamplingRow;

// One token per row from the device sampler's code, emulated on the host.
std::vector<int32_t> EmulatedTokens(const std::vector<float>& logits, int vocab,
                                    const std::vector<Row>& rows) {
  auto block = std::make_unique<ss::EmulatedBlock>();
  std::vector<int32_t> out;
  for (size_t i = 0; i < rows.size(); ++i) {
    std::vector<float> x(logits.begin() + i * vocab, logits.begin() + (i + 1) * vocab);
    const Row& r = rows[i];
    out.push_back(ss::SampleRowSearch(*block, x.data(), vocab, r.temperature, r.top_k, r.top_p,
                                      r.seed, r.step));
  }
  return out;
}

void ExpectSameTokens(const std::vector<float>& logits, int vocab, const std::vector<Row>& rows) {
  const std::vector<int32_t> cpu = SampleOn(*MakeCpu(1), logits, vocab, rows);
  const std::vector<int32_t> gpu = EmulatedTokens(logits, vocab, rows);
  ASSERT_EQ(cpu.size(), gpu.size());
  int mismatches = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    if (cpu[i] == gpu[i]) continue;
    if (++mismatches <= 5) {
      ADD_FAILURE() << "row " << i << " (T=" << rows[i].temperature << " top_k=" << rows[i].top_k
                    << " top_p=" << rows[i].top_p << " seed=" << rows[i].seed << "): cpu " << cpu[i]
                    << ", emulated device " << gpu[i];
    }
  }
  EXPECT_EQ(mismatches, 0) << "of " << rows.size() << " rows";
}

TEST(SampleSearchTest, RandomRowsMatchCpuAtVocab4096) {
  std::mt19937 rng(42);
  const int vocab = 4096, n = 600;
  ExpectSameTokens(LmLikeLogits(rng, n, vocab), vocab, MixedRows(n, 1000));
}

TEST(SampleSearchTest, RandomRowsMatchCpuAtVocab32000) {
  std::mt19937 rng(7);
  const int vocab = 32000, n = 180;
  ExpectSameTokens(LmLikeLogits(rng, n, vocab), vocab, MixedRows(n, 5000));
}

// top_k = 5 over five equal maxima: p = 0.2 each, so the prefix mass hits 0.2, 0.4, ...
// exactly at the float top_p values (whose doubles are a hair above or below), and u lands
// on every boundary as the seed varies.
TEST(SampleSearchTest, ExactTiesAtTopPBoundariesMatchCpu) {
  const int vocab = 64;
  std::vector<float> row(vocab, -3.0f);
  for (int i : {3, 9, 17, 40, 63}) row[i] = 2.0f;
  std::vector<Row> rows;
  for (float p : {0.2f, 0.4f, 0.6f, 0.8f, 1.0f, 0.3f}) {
    for (int s = 0; s < 40; ++s) rows.push_back(Row{1.0f, 5, p, 77 + s, s});
    for (int s = 0; s < 10; ++s) rows.push_back(Row{0.5f, 0, p, 900 + s, s});
  }
  std::vector<float> logits;
  for (size_t i = 0; i < rows.size(); ++i) logits.insert(logits.end(), row.begin(), row.end());
  ExpectSameTokens(logits, vocab, rows);
}

// Logits from a handful of values: large tie groups everywhere, including at the top-k and
// top-p bounds.
TEST(SampleSearchTest, TieHeavyRowsMatchCpu) {
  std::mt19937 rng(3);
  const int n = 800;
  for (int vocab : {37, 500}) {
    SCOPED_TRACE(vocab);
    std::uniform_int_distribution<int> level(0, 4);
    std::vector<float> logits(static_cast<size_t>(n) * vocab);
    for (float& x : logits) x = 0.5f * static_cast<float>(level(rng));
    std::vector<Row> rows;
    rows.reserve(n);
    const int ks[] = {0, 3, 5, 10};
    const float ps[] = {1.0f, 0.1f, 0.2f, 0.4f, 0.5f, 0.75f};
    for (int i = 0; i < n; ++i) {
      rows.push_back(Row{i % 2 ? 1.0f : 0.25f, ks[i % 4], ps[(i / 4) % 6], 31 * i + 5, i % 3});
    }
    ExpectSameTokens(logits, vocab, rows);
  }
}

TEST(SampleSearchTest, GreedyRowsTakeTheLowestIndexOfTheMaximum) {
  const int vocab = 2000;
  std::mt19937 rng(11);
  std::vector<float> logits = Random(rng, 4 * vocab);
  logits[1 * vocab + 700] = 9.0f;
  logits[1 * vocab + 1999] = 9.0f;
  logits[2 * vocab + 5] = 9.0f;
  logits[2 * vocab + 517] = 9.0f;  // the same lane of another pass: merged within a thread
  const std::vector<Row> rows{{0.0f}, {0.0f}, {-1.0f}, {0.0f}};
  ExpectSameTokens(logits, vocab, rows);
  const auto got = EmulatedTokens(logits, vocab, rows);
  EXPECT_EQ(got[1], 700);
  EXPECT_EQ(got[2], 5);
}

// v2's split greedy kernel: each split's block scans its range, the partials merge in split
// order; the token is the one-block kernel's and the CPU's for every split count, with ties
// across split boundaries, NaNs, infinities and empty splits.
TEST(SampleSearchTest, GreedyOverSplitsTakesTheOneBlockToken) {
  const int vocab = 5000;
  std::mt19937 rng(12);
  std::vector<float> logits = Random(rng, 6 * vocab);
  logits[0 * vocab + 4999] = 50.0f;  // the last element, in the last split
  logits[1 * vocab + 3000] = 9.0f;   // a tie far apart: the lower index wins
  logits[1 * vocab + 157] = 9.0f;
  logits[2 * vocab + 1250] = 9.0f;  // ties on both sides of the 2- and 4-split boundaries
  logits[2 * vocab + 1249] = 9.0f;
  logits[2 * vocab + 2500] = 9.0f;
  for (int i = 0; i < vocab; ++i) {
    logits[3 * vocab + i] = i % 3 == 0 ? NAN : -INFINITY;  // NaN never wins; the first -inf does
    logits[4 * vocab + i] = NAN;                           // all NaN: token 0, as the CPU
    logits[5 * vocab + i] = i < 4000 ? NAN : 1.0f;         // the early splits find nothing
  }
  const std::vector<Row> rows(6, Row{0.0f});
  const std::vector<int32_t> cpu = SampleOn(*MakeCpu(1), logits, vocab, rows);
  auto block = std::make_unique<ss::EmulatedBlock>();
  for (int r = 0; r < 6; ++r) {
    const float* x = logits.data() + r * vocab;
    const int one_block = block->ArgMax(x, vocab);
    EXPECT_EQ(one_block, cpu[r]) << "row " << r;
    for (int splits = 1; splits <= 33; ++splits) {
      std::vector<float> values(splits);
      std::vector<int> indices(splits);
      int covered = 0;
      for (int s = 0; s < splits; ++s) {
        const ss::GreedyRange g = ss::GreedySplitRange(vocab, splits, s);
        ASSERT_EQ(g.begin, std::min(covered, vocab)) << "splits leave a gap";
        covered = g.end;
        block->ArgMaxRange(x, g.begin, g.end, vocab, &values[s], &indices[s]);
      }
      ASSERT_EQ(covered, vocab);
      EXPECT_EQ(ss::GreedyMerge(values.data(), indices.data(), splits, vocab), one_block)
          << "row " << r << ", " << splits << " splits";
    }
  }
  EXPECT_EQ(cpu[0], 4999);
  EXPECT_EQ(cpu[1], 157);
  EXPECT_EQ(cpu[2], 1249);
  EXPECT_EQ(cpu[3], 1);
  EXPECT_EQ(cpu[5], 4000);
}

// -0.0 and +0.0 compare equal on the CPU, so the lower index comes first; keyed by raw bits,
// +0.0 would rank above -0.0 and top_k = 1 would keep the wrong one (review finding 18).
TEST(SampleSearchTest, NegativeZeroRanksAsPositiveZero) {
  EXPECT_EQ(ss::OrderKey(-0.0f), ss::OrderKey(0.0f));
  EXPECT_LT(ss::OrderKey(-1e-30f), ss::OrderKey(-0.0f));
  EXPECT_GT(ss::OrderKey(1e-30f), ss::OrderKey(-0.0f));
  const int vocab = 6;
  const std::vector<float> row{-1.0f, -0.0f, 0.0f, -2.0f, -0.0f, -5.0f};
  std::vector<Row> rows;
  std::vector<float> logits;
  for (int k : {1, 2, 3}) {
    for (int s = 0; s < 8; ++s) {
      rows.push_back(Row{1.0f, k, 1.0f, s, 0});
      logits.insert(logits.end(), row.begin(), row.end());
    }
  }
  ExpectSameTokens(logits, vocab, rows);
  for (int t : EmulatedTokens(logits, vocab, {rows[0]})) EXPECT_EQ(t, 1);
}

// The emulation runs the kernel's partition: a row shorter than the block leaves threads
// idle, a longer one gives every thread several elements; both must agree with the CPU, and
// the pass count stays what the header promises (8 key passes + tie passes per search).
TEST(SampleSearchTest, PassCountOfOneDraw) {
  std::mt19937 rng(5);
  const int vocab = 3 * ss::kThreads + 7;
  std::vector<float> x = Random(rng, vocab, -4.0f, 4.0f);
  ss::EmulatedBlock block;
  (void)ss::SampleRowSearch(block, x.data(), vocab, 1.0f, 0, 1.0f, 1, 0);
  // scale, denominator, then one search: total + 8 key passes + base, total + <= 3 index
  // passes (12 bits of 1543 at 16-ary) + base.
  EXPECT_GE(block.passes(), 2 + 10 + 3);
  EXPECT_LE(block.passes(), 2 + 10 + 5);
}

}  // namespace
}  // namespace saturn::testing
