#include "engine/engine_options.h"

#include "absl/strings/str_cat.h"

namespace saturn {

absl::Status CheckEngineLimits(int max_num_seqs_limit, int max_num_batched_tokens_limit) {
  if (max_num_seqs_limit < 1 || max_num_seqs_limit > kMaxNumSeqsLimit) {
    return absl::InvalidArgumentError(absl::StrCat("max_num_seqs_limit: ", max_num_seqs_limit,
                                                   " is outside [1, ", kMaxNumSeqsLimit, "]"));
  }
  if (max_num_batched_tokens_limit < 1 ||
      max_num_batched_tokens_limit > kMaxNumBatchedTokensLimit) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_num_batched_tokens_limit: ", max_num_batched_tokens_limit,
                     " is outside [1, ", kMaxNumBatchedTokensLimit, "]"));
  }
  return absl::OkStatus();
}

absl::Status CheckEngineOptions(const EngineOptions& o, int max_num_seqs_limit,
                                int max_num_batched_tokens_limit) {
  if (o.max_num_seqs < 1 || o.max_num_seqs > max_num_seqs_limit) {
    return absl::InvalidArgumentError(absl::StrCat("max_num_seqs: ", o.max_num_seqs,
                                                   " is outside [1, ", max_num_seqs_limit,
                                                   "] (the server's --max_num_seqs_limit)"));
  }
  if (o.max_num_batched_tokens < 1 || o.max_num_batched_tokens > max_num_batched_tokens_limit) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_num_batched_tokens: ", o.max_num_batched_tokens, " is outside [1, ",
        max_num_batched_tokens_limit, "] (the server's --max_num_batched_tokens_limit)"));
  }
  if (o.num_speculative_tokens < 0 || o.num_speculative_tokens > kMaxSpeculativeTokens) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_speculative_tokens: ", o.num_speculative_tokens, " is outside [0, ",
                     kMaxSpeculativeTokens, "]"));
  }
  return absl::OkStatus();
}

}  // namespace saturn
