// Tensor-parallel shards (engine/tp/tp_shard.h): which degrees a model takes, and that each
// rank's matrices are exactly its heads' rows and columns of the full ones. The ranks' forward
// passes are tp_ranks_test's (under mpiexec).
#include "engine/tp/tp_shard.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "engine/model/weights.h"

namespace saturn {
namespace {

TEST(TpShardTest, DegreesThatSplitHeadsAndGroupsAreTaken) {
  const ModelConfig small = PresetConfig("small").value();  // 12 heads, 4 KV heads, 2048 wide
  EXPECT_TRUE(CheckTensorParallel(small, 1).ok());
  EXPECT_TRUE(CheckTensorParallel(small, 2).ok());
  EXPECT_TRUE(CheckTensorParallel(small, 4).ok());
  const absl::Status three = CheckTensorParallel(small, 3);
  EXPECT_EQ(three.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(three.message().find("tensor_parallel: 3 does not divide num_kv_heads 4"),
            std::string::npos)
      << three;
  EXPECT_NE(three.message().find("degrees that do: 2, 4"), std::string::npos) << three;
  EXPECT_FALSE(CheckTensorParallel(small, 0).ok());
  const ModelConfig tiny = PresetConfig("tiny").value();  // 8 heads, 2 KV heads
  EXPECT_NE(CheckTensorParallel(tiny, 4).message().find("degrees that do: 2"), std::string::npos);
  const ModelConfig shard = ShardConfig(small, 4);
  EXPECT_EQ(shard.num_heads, 3);
  EXPECT_EQ(shard.num_kv_heads, 1);
  EXPECT_EQ(shard.intermediate_size, 512);
  EXPECT_EQ(shard.hidden_size, small.hidden_size);
  EXPECT_EQ(shard.vocab_size, small.vocab_size);
}

TEST(TpShardTest, EachRankHoldsItsHeadsRowsAndColumns) {
  const ModelConfig m = PresetConfig("tiny").value();
  const ModelWeights full = RandomWeights(m, 7).value();
  const int64_t d = m.hidden_size, hd = m.head_dim, hq = int64_t{m.num_heads} * hd,
                hkv = int64_t{m.num_kv_heads} * hd, f = m.intermediate_size;
  constexpr int kRanks = 2;
  for (int r = 0; r < kRanks; ++r) {
    SCOPED_TRACE(r);
    const ModelWeights s = ShardWeights(full, r, kRanks).value();
    const int64_t hq_r = hq / kRanks, hkv_r = hkv / kRanks, f_r = f / kRanks;
    ASSERT_EQ(s.layers.size(), full.layers.size());
    for (size_t l = 0; l < s.layers.size(); ++l) {
      const LayerWeights &a = s.layers[l], &b = full.layers[l];
      ASSERT_EQ(static_cast<int64_t>(a.wqkv.size()), (hq_r + 2 * hkv_r) * d);
      ASSERT_EQ(static_cast<int64_t>(a.w_gate_up.size()), 2 * f_r * d);
      ASSERT_EQ(static_cast<int64_t>(a.wo.size()), d * hq_r);
      ASSERT_EQ(static_cast<int64_t>(a.w_down.size()), d * f_r);
      for (int64_t c = 0; c < d; ++c) {
        // Row i of this rank's q, k and v is row r * width + i of the full model's.
        EXPECT_EQ(a.wqkv[0 * d + c], b.wqkv[(r * hq_r) * d + c]);
        EXPECT_EQ(a.wqkv[(hq_r + 1) * d + c], b.wqkv[(hq + r * hkv_r + 1) * d + c]);
        EXPECT_EQ(a.wqkv[(hq_r + hkv_r + 2) * d + c], b.wqkv[(hq + hkv + r * hkv_r + 2) * d + c]);
        EXPECT_EQ(a.w_gate_up[3 * d + c], b.w_gate_up[(r * f_r + 3) * d + c]);
        EXPECT_EQ(a.w_gate_up[(f_r + 5) * d + c], b.w_gate_up[(f + r * f_r + 5) * d + c]);
      }
      for (int64_t row = 0; row < d; row += 37) {
        // Column j of this rank's o_proj and down_proj is column r * width + j of the full one.
        EXPECT_EQ(a.wo[row * hq_r + 4], b.wo[row * hq + r * hq_r + 4]);
        EXPECT_EQ(a.w_down[row * f_r + 9], b.w_down[row * f + r * f_r + 9]);
      }
      EXPECT_EQ(a.attn_norm, b.attn_norm);
      EXPECT_EQ(a.mlp_norm, b.mlp_norm);
    }
    EXPECT_EQ(s.embedding, full.embedding);
    EXPECT_EQ(s.final_norm, full.final_norm);
    // tiny is tied: each rank's head is its half of the embedding's rows (2048 of 4096).
    ASSERT_EQ(static_cast<int64_t>(s.lm_head.size()), 2048 * d);
    EXPECT_TRUE(std::equal(s.lm_head.begin(), s.lm_head.end(),
                           full.embedding.begin() + static_cast<int64_t>(r) * 2048 * d));
  }
  // An untied head is split the same way; a vocabulary that does not divide gives the first
  // ranks a row more.
  ModelConfig untied = m;
  untied.tie_word_embeddings = false;
  const ModelWeights with_head = RandomWeights(untied, 7).value();
  ASSERT_FALSE(with_head.lm_head.empty());
  const ModelWeights head1 = ShardWeights(with_head, 1, kRanks).value();
  EXPECT_TRUE(
      std::equal(head1.lm_head.begin(), head1.lm_head.end(), with_head.lm_head.begin() + 2048 * d));
  EXPECT_EQ(VocabCounts(4096, 2), (std::vector<int64_t>{2048, 2048}));
  EXPECT_EQ(VocabCounts(32001, 4), (std::vector<int64_t>{8001, 8000, 8000, 8000}));
  EXPECT_FALSE(ShardWeights(full, 2, kRanks).ok());
  EXPECT_FALSE(ShardWeights(full, 0, 3).ok());
}

}  // namespace
}  // namespace saturn
