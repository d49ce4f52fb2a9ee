// Paged attention on CUDA (kernels/cuda/attention_decode.cu, attention_prefill.cu) against the
// CPU twin, one test suite per kernel: decode (one query per sequence, GQA, shuffled block
// tables) and ragged causal prefill chunks over the paged cache, several head shapes.
// Skips without a CUDA device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>

#include "tests/kernels/cuda/cuda_test_util.h"

namespace saturn::testing {
namespace {

struct AttnCase {
  const char* name;
  int num_heads, num_kv_heads, head_dim;
  std::vector<int> query_lens;    // per sequence
  std::vector<int> context_lens;  // per sequence (>= query_len)
};

// Keeps CTest's test names readable (gtest would otherwise print the struct's bytes).
void PrintTo(const AttnCase& c, std::ostream* os) { *os << c.name; }

// One case on the CPU twin and on the device over the same cache, block tables and queries.
void ExpectMatchesCpu(const AttnCase& c) {
  SATURN_REQUIRE_CUDA(gpu);
  auto cpu_or = CreateBackend("cpu", 2, "f32");
  ASSERT_TRUE(cpu_or.ok()) << cpu_or.status();
  std::unique_ptr<Backend> cpu = std::move(*cpu_or);
  const AttentionShape shape{c.num_heads, c.num_kv_heads, c.head_dim, /*block_size=*/16,
                             1.0f / std::sqrt(static_cast<float>(c.head_dim))};
  const PagedAttentionInputs in =
      MakePagedAttention(shape, c.query_lens, c.context_lens, /*spare_blocks=*/1, 42, 1.0f);
  const std::vector<float> ref = RunPagedAttention(cpu.get(), in),
                           got = RunPagedAttention(gpu.get(), in);
  EXPECT_LT(RelError(got, ref), kBf16Tolerance);
}

std::string CaseName(const ::testing::TestParamInfo<AttnCase>& info) { return info.param.name; }

// One query row per sequence: attention_decode.cu.
class CudaAttentionDecodeTest : public ::testing::TestWithParam<AttnCase> {};

TEST_P(CudaAttentionDecodeTest, MatchesCpu) { ExpectMatchesCpu(GetParam()); }

INSTANTIATE_TEST_SUITE_P(
    Cases, CudaAttentionDecodeTest,
    ::testing::Values(AttnCase{"decode_mha_hd64", 4, 4, 64, {1, 1, 1}, {1, 17, 200}},
                      AttnCase{"decode_gqa_hd32", 8, 2, 32, {1, 1, 1, 1, 1}, {5, 16, 33, 64, 300}},
                      AttnCase{"decode_gqa_hd128", 8, 1, 128, {1, 1}, {1000, 3}}),
    CaseName);

// Causal query chunks over the paged context: attention_prefill.cu.
class CudaAttentionPrefillTest : public ::testing::TestWithParam<AttnCase> {};

TEST_P(CudaAttentionPrefillTest, MatchesCpu) { ExpectMatchesCpu(GetParam()); }

INSTANTIATE_TEST_SUITE_P(
    Cases, CudaAttentionPrefillTest,
    ::testing::Values(AttnCase{"prefill_single", 4, 2, 64, {37}, {37}},
                      AttnCase{"prefill_ragged_chunks", 8, 2, 32, {5, 17, 1, 33}, {5, 40, 9, 100}},
                      AttnCase{"prefill_hd128_long", 4, 4, 128, {70, 2}, {150, 2}},
                      AttnCase{"prefill_hd256", 2, 1, 256, {20}, {50}}),
    CaseName);

}  // namespace
}  // namespace saturn::testing
