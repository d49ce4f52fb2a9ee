// Host log_softmax, rank and top-N of one logits row (see the header).
#include "engine/logprobs.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace saturn {

PositionLogprobs ComputeLogprobs(const float* logits, int vocab, int token, int top_n) {
  double mx = -std::numeric_limits<double>::infinity();
  for (int i = 0; i < vocab; ++i) mx = std::max(mx, static_cast<double>(logits[i]));
  double sum = 0;
  for (int i = 0; i < vocab; ++i) sum += std::exp(static_cast<double>(logits[i]) - mx);
  const double lse = mx + std::log(sum);

  PositionLogprobs out;
  const float chosen = logits[token];
  int greater = 0;
  for (int i = 0; i < vocab; ++i) greater += logits[i] > chosen ? 1 : 0;
  out.token = {token, static_cast<float>(chosen - lse), greater + 1};

  const int n = std::clamp(top_n, 0, vocab);
  if (n == 0) return out;
  std::vector<int> idx(vocab);
  for (int i = 0; i < vocab; ++i) idx[i] = i;
  // Larger logit first, lower id first on ties: a total order, so the result is stable.
  std::partial_sort(idx.begin(), idx.begin() + n, idx.end(), [&](int a, int b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  out.top.reserve(n);
  for (int k = 0; k < n; ++k) {
    const int id = idx[k];
    // Rank as vLLM counts it: ties share the rank of the first of them.
    int rank = k + 1;
    while (rank > 1 && logits[idx[rank - 2]] == logits[id]) --rank;
    out.top.push_back({id, static_cast<float>(logits[id] - lse), rank});
  }
  return out;
}

}  // namespace saturn
