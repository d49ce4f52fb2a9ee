// CPU sampler: greedy = argmax (NaN never wins), top-k and top-p never leave their kept sets, the
// token for a (seed, step) is reproducible and matches a straightforward full-sort reference of the
// row semantics on Backend::Sample, and different seeds spread over a flat distribution.
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <set>

#include "kernels/sampling_rng.h"
#include "tests/kernels/sampling_test_util.h"

namespace saturn::testing {
namespace {

using Row = SamplingRow;

// Samples one token per row; every row uses the same logits.
std::vector<int32_t> SampleRows(Backend& b, const std::vector<float>& logits,
                                const std::vector<Row>& rows) {
  std::vector<float> all;
  for (size_t i = 0; i < rows.size(); ++i) all.insert(all.end(), logits.begin(), logits.end());
  return SampleOn(b, all, static_cast<int64_t>(logits.size()), rows);
}

// Kept tokens in final order with their probabilities (the row semantics, full sort).
std::vector<std::pair<int32_t, double>> Kept(const std::vector<float>& logits, const Row& r) {
  const int vocab = logits.size();
  std::vector<int32_t> ids(vocab);
  std::iota(ids.begin(), ids.end(), 0);
  std::vector<float> z(vocab);
  for (int i = 0; i < vocab; ++i) z[i] = logits[i] / r.temperature;
  auto before = [&](int32_t a, int32_t b) { return z[a] > z[b] || (z[a] == z[b] && a < b); };
  std::sort(ids.begin(), ids.end(), before);
  if (r.top_k > 0 && r.top_k < vocab) ids.resize(r.top_k);
  double sum = 0;
  for (int32_t id : ids) sum += std::exp(static_cast<double>(z[id]) - z[ids[0]]);
  std::vector<std::pair<int32_t, double>> kept;
  double cum = 0;
  for (int32_t id : ids) {
    const double p = std::exp(static_cast<double>(z[id]) - z[ids[0]]) / sum;
    kept.emplace_back(id, p);
    cum += p;
    if (r.top_p < 1.0f && cum >= r.top_p) break;
  }
  return kept;
}

int32_t RefSample(const std::vector<float>& logits, const Row& r) {
  if (r.temperature <= 0) {
    return std::max_element(logits.begin(), logits.end()) - logits.begin();  // first max
  }
  const std::vector<std::pair<int32_t, double>> kept = Kept(logits, r);
  double mass = 0;
  for (auto [id, p] : kept) mass += p;
  const double u = SampleUniform(r.seed, r.step) * (r.top_p < 1.0f ? mass : 1.0);
  double cum = 0;
  for (auto [id, p] : kept) {
    if ((cum += p) > u) return id;
  }
  return kept.back().first;
}

std::vector<float> Normal(std::mt19937& rng, int n, float sd) {
  std::normal_distribution<float> d(0, sd);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

class CpuSamplingTest : public ::testing::TestWithParam<int> {
 protected:
  std::unique_ptr<Backend> b_ = MakeCpu(GetParam());
  std::mt19937 rng_{42};
};

TEST_P(CpuSamplingTest, GreedyIsArgmaxLowestIndexOnTies) {
  for (int vocab : {1, 7, 1000, 32000}) {
    std::vector<float> logits = Normal(rng_, vocab, 2);
    std::vector<Row> rows(3);
    rows[0].temperature = 0;
    rows[1].temperature = -1;
    rows[2].temperature = 0;
    rows[2].top_k = 5;  // ignored when greedy
    const int32_t want = std::max_element(logits.begin(), logits.end()) - logits.begin();
    for (int32_t t : SampleRows(*b_, logits, rows)) EXPECT_EQ(t, want);
    if (vocab > 10) {
      logits[3] = logits[vocab - 2] = 100.0f;  // tie: lower index wins
      EXPECT_EQ(SampleRows(*b_, logits, rows)[0], 3);
    }
  }
}

// NaN never wins a greedy row, at the front or anywhere else (as on CUDA); all NaN gives 0.
TEST_P(CpuSamplingTest, GreedySkipsNaNWhereverItStands) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<Row> greedy(1, Row{0.0f});
  EXPECT_EQ(SampleRows(*b_, {nan, 1.0f, 3.0f, nan, 3.0f}, greedy)[0], 2);
  EXPECT_EQ(SampleRows(*b_, {2.0f, nan, 5.0f}, greedy)[0], 2);
  EXPECT_EQ(SampleRows(*b_, {nan, -INFINITY, nan}, greedy)[0], 1);
  EXPECT_EQ(SampleRows(*b_, {nan, nan}, greedy)[0], 0);
}

TEST_P(CpuSamplingTest, TopKStaysInTopK) {
  std::vector<float> logits = Normal(rng_, 500, 1);
  for (int k : {1, 2, 5, 50}) {
    std::vector<Row> rows(400);
    for (int i = 0; i < 400; ++i) rows[i] = {1.5f, k, 1.0f, 1000 + i, i % 7};
    std::set<int32_t> top;
    for (auto [id, p] : Kept(logits, rows[0])) top.insert(id);
    ASSERT_EQ(top.size(), static_cast<size_t>(k));
    std::set<int32_t> seen;
    for (int32_t t : SampleRows(*b_, logits, rows)) {
      EXPECT_TRUE(top.count(t)) << "token " << t << " outside top " << k;
      seen.insert(t);
    }
    if (k > 1) {
      EXPECT_GT(seen.size(), 1u);
    }
  }
}

TEST_P(CpuSamplingTest, TopPStaysInNucleusWithRightFrequencies) {
  std::vector<float> logits = Normal(rng_, 200, 2.5f);
  for (float top_p : {0.3f, 0.7f, 0.95f}) {
    const int n = 4000;
    std::vector<Row> rows(n);
    for (int i = 0; i < n; ++i) rows[i] = {1.0f, 0, top_p, 77 * i + 3, 11};
    const std::vector<std::pair<int32_t, double>> kept = Kept(logits, rows[0]);
    double mass = 0;
    std::map<int32_t, double> nucleus;
    for (auto [id, p] : kept) {
      mass += p;
      nucleus[id] = p;
    }
    EXPECT_GE(mass, top_p);
    std::map<int32_t, int> counts;
    for (int32_t t : SampleRows(*b_, logits, rows)) {
      EXPECT_TRUE(nucleus.count(t)) << "token " << t << " outside the top-p " << top_p;
      ++counts[t];
    }
    for (auto [id, p] : nucleus) {
      EXPECT_NEAR(counts[id] / static_cast<double>(n), p / mass, 0.04) << "token " << id;
    }
  }
}

TEST_P(CpuSamplingTest, MatchesFullSortReference) {
  for (int vocab : {3, 100, 5000}) {
    std::vector<float> logits = Normal(rng_, vocab, 3);
    logits[vocab / 2] = logits[0];  // a tie the ordering must break by index
    std::vector<Row> rows;
    for (int i = 0; i < 300; ++i) {
      Row r;
      r.temperature = (i % 4 == 0) ? 0.0f : 0.3f + 0.2f * (i % 7);
      r.top_k = (i % 3 == 0) ? 0 : 1 + i % 40;
      r.top_p = (i % 5 < 2) ? 1.0f : 0.5f + 0.1f * (i % 5);
      r.seed = 12345 + 31 * i;
      r.step = i;
      rows.push_back(r);
    }
    std::vector<int32_t> got = SampleRows(*b_, logits, rows);
    for (size_t i = 0; i < rows.size(); ++i) {
      EXPECT_EQ(got[i], RefSample(logits, rows[i])) << "row " << i << " vocab " << vocab;
    }
  }
}

// Rows the sampler's buckets (kernels/cpu/sampling.cc) must walk like a full sort: an LM
// vocabulary nearly flat (the draw lands deep in the order), peaked, all equal (one bucket),
// and with masked (-inf) tokens, each with and without top-k and top-p.
TEST_P(CpuSamplingTest, MatchesFullSortReferenceOnWideRows) {
  const int vocab = 32000;
  std::vector<std::vector<float>> cases = {Normal(rng_, vocab, 0.05f), Normal(rng_, vocab, 2.0f),
                                           std::vector<float>(vocab, 1.5f)};
  std::vector<float> masked = Normal(rng_, vocab, 1.0f);
  for (int i = 0; i < vocab; i += 3) masked[i] = -INFINITY;
  cases.push_back(masked);
  for (size_t c = 0; c < cases.size(); ++c) {
    std::vector<Row> rows;
    for (int i = 0; i < 24; ++i) {
      rows.push_back(Row{i % 2 ? 1.0f : 2.5f, (i / 2) % 3 == 2 ? 5000 : 0,
                         (i / 6) % 2 ? 0.9f : 1.0f, 777 + 13 * i, i});
    }
    std::vector<int32_t> got = SampleRows(*b_, cases[c], rows);
    for (size_t i = 0; i < rows.size(); ++i) {
      EXPECT_EQ(got[i], RefSample(cases[c], rows[i])) << "case " << c << " row " << i;
    }
  }
}

// At a temperature a NaN logit is never drawn (as greedy rows skip it): every other token is.
TEST_P(CpuSamplingTest, NaNIsNeverDrawn) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<Row> rows;
  for (int i = 0; i < 200; ++i) rows.push_back(Row{1.0f, i % 2 ? 2 : 0, 1.0f, 40 + i, i});
  std::set<int32_t> seen;
  for (int32_t t : SampleRows(*b_, {nan, 0.0f, nan, 0.0f, nan}, rows)) seen.insert(t);
  EXPECT_EQ(seen, (std::set<int32_t>{1, 3}));
  EXPECT_EQ(SampleRows(*b_, {nan, nan}, {Row{1.0f}})[0], 0);  // nothing to draw: greedy's 0
}

TEST_P(CpuSamplingTest, DeterministicPerSeedAndStep) {
  std::vector<float> flat(1000, 0.0f);
  std::vector<Row> rows;
  rows.reserve(200);
  for (int i = 0; i < 200; ++i) rows.push_back({1.0f, 0, 1.0f, 500 + i, 3});
  std::vector<int32_t> a = SampleRows(*b_, flat, rows), again = SampleRows(*b_, flat, rows);
  EXPECT_EQ(a, again);
  EXPECT_GT(std::set<int32_t>(a.begin(), a.end()).size(), 150u);  // seeds spread out
  for (Row& r : rows) r.seed = 500, r.step = static_cast<int32_t>(&r - rows.data());
  std::vector<int32_t> by_step = SampleRows(*b_, flat, rows);
  EXPECT_GT(std::set<int32_t>(by_step.begin(), by_step.end()).size(), 150u);
}

INSTANTIATE_TEST_SUITE_P(Threads, CpuSamplingTest, ::testing::Values(1, 2), ThreadsName);

TEST(CpuSamplingErrors, WrongParamDType) {
  std::unique_ptr<Backend> b = MakeCpu(1);
  DevTensor logits = F32(*b, 1, 4, {1, 2, 3, 4}), temp = F32(*b, 1, 1, {1.0f});
  DevTensor top_k = F32(*b, 1, 1, {2.0f});  // should be i32
  DevTensor top_p = F32(*b, 1, 1, {1.0f}),
            seed = FromHost(*b, DType::kI64, 1, 1, std::vector<int64_t>{1});
  DevTensor step = I32(*b, 1, 1, {0}), out = I32(*b, 1, 1, {0});
  absl::Status s =
      b->Sample(logits.t, SamplingBatch{temp.t, top_k.t, top_p.t, seed.t, step.t}, out.t);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("sample"), std::string::npos) << s;
}

}  // namespace
}  // namespace saturn::testing
