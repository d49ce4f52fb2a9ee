// The engine options that may change while it serves (applied at a step boundary), and their
// one range check. Step records carry the options in force for each step (step_record.h).
#pragma once

#include "absl/status/status.h"

namespace saturn {

struct EngineOptions {
  int max_num_seqs = 64;
  int max_num_batched_tokens = 2048;
  bool cuda_graphs = false;
  bool operator==(const EngineOptions&) const = default;
};

// The *_limits themselves: far past any device's batch (buffers and graph sizes are sized by
// them at start). INVALID_ARGUMENT names the field, the value and the range.
inline constexpr int kMaxNumSeqsLimit = 1 << 16, kMaxNumBatchedTokensLimit = 1 << 24;
absl::Status CheckEngineLimits(int max_num_seqs_limit, int max_num_batched_tokens_limit);

// Each limit in [1, its *_limit]; INVALID_ARGUMENT names the field, the value and the range.
// Start-up flags (EngineConfig::Validate, ServerConfig::Validate) and UpdateEngineOptions
// both check here.
absl::Status CheckEngineOptions(const EngineOptions& options, int max_num_seqs_limit,
                                int max_num_batched_tokens_limit);

}  // namespace saturn
