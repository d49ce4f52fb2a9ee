// N-gram lookup in one backward pass over the tokens (linear in the context): the latest
// earlier position where the longest suffix of min_n .. max_n tokens occurs, and what followed
// it, continued periodically past the end.
#include "engine/ngram_proposer.h"

#include <algorithm>

namespace saturn {

std::vector<int> ProposeNgram(absl::Span<const int> tokens, int k, const NgramConfig& config) {
  const int len = static_cast<int>(tokens.size());
  const int max_n = std::min(config.max_n, len - 1), min_n = std::max(config.min_n, 1);
  if (k <= 0 || max_n < min_n) return {};
  // One pass from the end: each earlier position that ends like the tokens do, and how many
  // tokens back the two agree (at most max_n); the longest wins, the latest among equals.
  int best_end = -1, best_n = min_n - 1;
  for (int i = len - 2; i >= 0 && best_n < max_n; --i) {
    int n = 0;
    while (n < max_n && n <= i && tokens[i - n] == tokens[len - 1 - n]) ++n;
    if (n > best_n) best_n = n, best_end = i;
  }
  if (best_end < 0) return {};
  // What followed, read on into the proposal itself where it reaches the end: a text that
  // repeats with period len - 1 - best_end goes on repeating (a model looping on one token
  // proposes k of it, not one).
  std::vector<int> out;
  out.reserve(k);
  for (int j = best_end + 1; static_cast<int>(out.size()) < k; ++j) {
    out.push_back(j < len ? tokens[j] : out[j - len]);
  }
  return out;
}

}  // namespace saturn
