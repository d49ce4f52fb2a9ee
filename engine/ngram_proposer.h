// Speculative decoding's proposer by n-gram lookup (vLLM's "ngram" method, llama.cpp's prompt
// lookup decoding): the tokens that followed the latest earlier occurrence of a request's last
// n tokens in its own prompt and output, trying n from the longest down. No model: text that
// repeats (code, quoted context, a model caught in a loop) is proposed for free, and the verify
// step keeps only what the model itself would have drawn (engine/scheduler.h).
#pragma once

#include <vector>

#include "absl/types/span.h"

namespace saturn {

struct NgramConfig {
  int min_n = 1;  // shortest suffix matched (vLLM's prompt_lookup_min)
  int max_n = 4;  // longest (prompt_lookup_max)
};

// `k` proposed continuations of `tokens` (empty: no earlier occurrence of any suffix of
// min_n .. max_n tokens): what followed the latest occurrence of the longest suffix that has
// one, read on into the proposal where it reaches the end (the text repeats with that period).
std::vector<int> ProposeNgram(absl::Span<const int> tokens, int k, const NgramConfig& config);

}  // namespace saturn
