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

#include "tests/cuda/cuda_test_util.h"

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
  const int block_size = 16, seqs = static_cast<int>(c.query_lens.size());
  const int max_ctx = *std::max_element(c.context_lens.begin(), c.context_lens.end());
  const int max_q = *std::max_element(c.query_lens.begin(), c.query_lens.end());
  const int max_blocks = (max_ctx + block_size - 1) / block_size + 1;  // one spare column
  const int num_blocks = seqs * max_blocks + 3;
  // Shuffled physical blocks so the block table is really followed.
  std::vector<int> phys(num_blocks);
  std::iota(phys.begin(), phys.end(), 0);
  std::shuffle(phys.begin(), phys.end(), std::mt19937(42));
  std::vector<int32_t> tables(seqs * max_blocks), qstart(seqs + 1, 0), ctx(seqs);
  int64_t pairs = 0, ctx_tokens = 0;
  for (int s = 0; s < seqs; ++s) {
    for (int b = 0; b < max_blocks; ++b) tables[s * max_blocks + b] = phys[s * max_blocks + b];
    qstart[s + 1] = qstart[s] + c.query_lens[s];
    ctx[s] = c.context_lens[s];
    ctx_tokens += ctx[s];
    for (int i = 0; i < c.query_lens[s]; ++i) pairs += ctx[s] - c.query_lens[s] + i + 1;
  }
  const int tokens = qstart[seqs];
  const int64_t rows = static_cast<int64_t>(num_blocks) * block_size;
  const int kv_w = c.num_kv_heads * c.head_dim, q_w = c.num_heads * c.head_dim;
  const auto q = RandomValues(tokens * q_w, 21), kc = RandomValues(rows * kv_w, 22),
             vc = RandomValues(rows * kv_w, 23);
  AttentionShape shape{c.num_heads, c.num_kv_heads, c.head_dim, block_size,
                       1.0f / std::sqrt(static_cast<float>(c.head_dim))};
  std::vector<float> ref, got;
  for (Backend* b : {cpu.get(), gpu.get()}) {
    DevTensor dq = ComputeTensor(b, tokens, q_w, q), dk = ComputeTensor(b, rows, kv_w, kc),
              dv = ComputeTensor(b, rows, kv_w, vc), out = ComputeTensor(b, tokens, q_w, {});
    DevTensor dqs = RawTensor(b, DType::kI32, 1, seqs + 1, qstart),
              dctx = RawTensor(b, DType::kI32, 1, seqs, ctx),
              dtab = RawTensor(b, DType::kI32, seqs, max_blocks, tables);
    Poison(b, out.t);
    AttentionBatch batch{dqs.t, dctx.t, dtab.t, seqs, max_q, max_ctx, pairs, ctx_tokens};
    absl::Status st = b->Attention(dq.t, dk.t, dv.t, batch, shape, out.t);
    ASSERT_TRUE(st.ok()) << b->name() << ": " << st;
    (b == cpu.get() ? ref : got) = ReadFloats(b, out.t);
  }
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
