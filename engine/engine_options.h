// The engine options that may change while it serves (applied at a step boundary), and their
// one range check. Step records carry the options in force for each step (step_record.h).
#pragma once

#include "absl/status/status.h"

namespace saturn {

struct EngineOptions {
  int max_num_seqs = 64;
  int max_num_batched_tokens = 2048;
  bool cuda_graphs = false;
  // Requests take the KV blocks of a prefix already computed (engine/block_manager.h). Off,
  // blocks are still keyed and the reuse missed is counted.
  bool prefix_caching = true;
  // Speculative decoding by n-gram lookup: tokens proposed per decoding request and step
  // (engine/scheduler.h; 0: off). Needs the plain step loop (EngineConfig::async_scheduling).
  int num_speculative_tokens = 0;
  bool operator==(const EngineOptions&) const = default;
};

// The *_limits themselves: far past any device's batch (buffers and graph sizes are sized by
// them at start). INVALID_ARGUMENT names the field, the value and the range.
inline constexpr int kMaxNumSeqsLimit = 1 << 16, kMaxNumBatchedTokensLimit = 1 << 24;
inline constexpr int kMaxSpeculativeTokens = 16;
// Tokens per proposal the scheduler scores while speculation is off: the K the plan's
// speculation action proposes (Scheduler, engine/diag/plan.cc).
inline constexpr int kScoredSpeculativeTokens = 4;
absl::Status CheckEngineLimits(int max_num_seqs_limit, int max_num_batched_tokens_limit);

// Each limit in [1, its *_limit], num_speculative_tokens in [0, kMaxSpeculativeTokens];
// INVALID_ARGUMENT names the field, the value and the range.
// Start-up flags (EngineConfig::Validate, ServerConfig::Validate) and UpdateEngineOptions
// both check here.
absl::Status CheckEngineOptions(const EngineOptions& options, int max_num_seqs_limit,
                                int max_num_batched_tokens_limit);

}  // namespace saturn
