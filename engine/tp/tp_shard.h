// Megatron-style tensor-parallel sharding of a Llama decoder (Shoeybi et al. 2019): rank r of
// t holds heads [r H/t, (r+1) H/t) of q, k and v and the same slice of the SwiGLU's gate and up
// rows (column-parallel: no communication before them), and the matching input columns of
// o_proj and down_proj (row-parallel: each rank's product is a partial sum, all-reduced after
// it). The LM head is split by vocabulary (each rank's slice of the logits, gathered on rank 0,
// which samples; Megatron's parallel head, as vLLM's ParallelLMHead). The embedding and the
// norms stay whole. GQA groups stay on one rank: t must divide the KV heads.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/model/model_config.h"
#include "engine/model/weights.h"

namespace saturn {

// OK when `ranks` can split `m`: it divides the query heads, the KV heads and the SwiGLU
// width. The error names tensor_parallel, the field it does not divide and the degrees that do.
absl::Status CheckTensorParallel(const ModelConfig& m, int ranks);

// The shape one rank computes: heads, KV heads and intermediate size divided by `ranks`
// (hidden size, vocabulary and layers unchanged).
ModelConfig ShardConfig(const ModelConfig& m, int ranks);

// The vocabulary split of a parallel LM head: each rank's row count, in rank order (the first
// vocab % ranks ranks take one more).
std::vector<int64_t> VocabCounts(int vocab, int ranks);

// Rank `rank`'s slice of `full` (config unchanged, the full model's). Every rank's lm_head is
// its VocabCounts rows of the head (of the embedding where tied; the embedding itself stays
// whole). `full`'s matrices are released as they are sliced.
absl::StatusOr<ModelWeights> ShardWeights(ModelWeights full, int rank, int ranks);

}  // namespace saturn
