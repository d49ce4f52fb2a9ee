// The sampler tests' rows: one row's sampling parameters, and Backend::Sample over a batch of
// rows. Shared by the CPU sampler's test, the host emulation of the device sampler
// (cuda_sample_search_test.cc) and the CUDA sampler's test. Test-only; owns no test cases.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "tests/kernels/cpu/cpu_test_util.h"

namespace saturn::testing {

struct SamplingRow {
  float temperature = 1.0f;
  int32_t top_k = 0;
  float top_p = 1.0f;
  int64_t seed = 0;
  int32_t step = 0;
};

// One token per row from `b`; logits are [rows.size(), vocab] f32.
inline std::vector<int32_t> SampleOn(Backend& b, const std::vector<float>& logits, int64_t vocab,
                                     const std::vector<SamplingRow>& rows) {
  const int64_t n = rows.size();
  std::vector<float> temp, top_p;
  std::vector<int32_t> top_k, step;
  std::vector<int64_t> seed;
  for (const SamplingRow& r : rows) {
    temp.push_back(r.temperature);
    top_k.push_back(r.top_k);
    top_p.push_back(r.top_p);
    seed.push_back(r.seed);
    step.push_back(r.step);
  }
  DevTensor dl = F32(b, n, vocab, logits), dt = F32(b, 1, n, temp), dk = I32(b, 1, n, top_k);
  DevTensor dp = F32(b, 1, n, top_p), ds = FromHost(b, DType::kI64, 1, n, seed);
  DevTensor dst = I32(b, 1, n, step), out = I32(b, 1, n, std::vector<int32_t>(n, -7));
  absl::Status s = b.Sample(dl.t, SamplingBatch{dt.t, dk.t, dp.t, ds.t, dst.t}, out.t);
  EXPECT_TRUE(s.ok()) << b.name() << ": " << s;
  return ToHost<int32_t>(b, out.t);
}

// Peaked random rows, as an LM head gives: a Gaussian floor (sd 2) plus eight large logits
// per row; [rows, vocab].
inline std::vector<float> LmLikeLogits(std::mt19937& rng, int rows, int vocab) {
  std::normal_distribution<float> floor(0.0f, 2.0f);
  std::vector<float> v(static_cast<size_t>(rows) * vocab);
  for (float& x : v) x = floor(rng);
  for (int r = 0; r < rows; ++r) {
    for (int j = 0; j < 8; ++j) v[static_cast<size_t>(r) * vocab + rng() % vocab] += 6.0f + j;
  }
  return v;
}

// n rows cycling through temperatures, top-k and top-p values, seeds seed0, seed0 + 1, ...
inline std::vector<SamplingRow> MixedRows(int n, int64_t seed0) {
  const float temps[] = {0.7f, 1.0f, 1.5f};
  const int ks[] = {0, 0, 50, 1000};
  const float ps[] = {1.0f, 0.95f, 0.9f, 0.5f, 0.99f};
  std::vector<SamplingRow> rows;
  rows.reserve(n);
  for (int i = 0; i < n; ++i) {
    rows.push_back(SamplingRow{temps[i % 3], ks[(i / 3) % 4], ps[(i / 12) % 5], seed0 + i, i % 11});
  }
  return rows;
}

}  // namespace saturn::testing
