// Shared by the model runner tests (model_runner_test, model_runner_graph_test and
// tests/kernels/cuda/cuda_runner_test): the tiny model's seeded random weights and a step plan of
// one whole prompt. Test-only; owns no test cases.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "engine/block_manager.h"
#include "engine/model/model_config.h"
#include "engine/model/weights.h"
#include "engine/model_runner.h"

namespace saturn::testing_runner {

// The tiny preset's random weights from `seed`; max_position > 0 replaces the preset's
// max_position_embeddings.
inline ModelWeights TinyWeights(uint64_t seed, int max_position = 0) {
  absl::StatusOr<ModelConfig> cfg = PresetConfig("tiny");
  EXPECT_TRUE(cfg.ok()) << cfg.status();
  if (!cfg.ok()) return {};
  if (max_position > 0) cfg->max_position_embeddings = max_position;
  absl::StatusOr<ModelWeights> w = RandomWeights(*cfg, seed);
  EXPECT_TRUE(w.ok()) << w.status();
  return w.ok() ? std::move(*w) : ModelWeights{};
}

// The runner tests' limits: 4 sequences, 64 tokens a step and of context, blocks of 4 tokens.
inline RunnerConfig SmallRunnerConfig(int num_kv_blocks, std::vector<int> graph_sizes = {}) {
  return RunnerConfig{.max_num_seqs_limit = 4,
                      .max_num_batched_tokens_limit = 64,
                      .max_model_len = 64,
                      .block_size = 4,
                      .num_kv_blocks = num_kv_blocks,
                      .graph_sizes = std::move(graph_sizes)};
}

// One sampling sequence (request 1) holding the whole prompt, its blocks taken from `blocks`.
inline StepPlan WholePromptPlan(BlockManager& blocks, std::vector<int> tokens) {
  ScheduledSeq s;
  s.request_id = 1;
  s.token_ids = std::move(tokens);
  s.num_prompt = static_cast<int>(s.token_ids.size());
  EXPECT_TRUE(blocks.EnsureCapacity(&s.block_table, static_cast<int>(s.token_ids.size())));
  s.sample = true;
  StepPlan plan;
  plan.seqs.push_back(std::move(s));
  return plan;
}

}  // namespace saturn::testing_runner
