// N-gram lookup: for n = max_n .. min_n, scan backwards for the latest earlier position where
// the last n tokens occur and propose what followed them, continued periodically past the end.
// Linear in the context per n.
#include "engine/ngram_proposer.h"

#include <algorithm>

namespace saturn {

std::vector<int> ProposeNgram(absl::Span<const int> tokens, int k, const NgramConfig& config) {
  const int len = static_cast<int>(tokens.size());
  if (k <= 0) return {};
  for (int n = std::min(config.max_n, len - 1); n >= std::max(config.min_n, 1); --n) {
    const absl::Span<const int> suffix = tokens.subspan(len - n);
    // Occurrences ending before the suffix itself, latest first: [i, i + n) with i + n < len.
    for (int i = len - n - 1; i >= 0; --i) {
      if (!std::equal(suffix.begin(), suffix.end(), tokens.begin() + i)) continue;
      // What followed, read on into the proposal itself where it reaches the end: a text that
      // repeats with period len - from goes on repeating (a model looping on one token proposes
      // k of it, not one).
      std::vector<int> out;
      out.reserve(k);
      for (int j = i + n; static_cast<int>(out.size()) < k; ++j) {
        out.push_back(j < len ? tokens[j] : out[j - len]);
      }
      return out;
    }
  }
  return {};
}

}  // namespace saturn
