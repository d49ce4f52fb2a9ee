// A fake greedy "model" for scheduler tests: the next token is a hash of the whole context
// (never the eos id 2), and the reference output a request gets when nothing goes wrong.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/request.h"

namespace saturn::testing_sched {

inline int NextToken(const std::vector<int>& context) {
  uint64_t h = 1469598103934665603ull;
  for (int t : context) h = (h ^ static_cast<uint64_t>(t)) * 1099511628211ull;
  return 3 + static_cast<int>(h % 97);
}

// The request's greedy output under `next` (NextToken unless given).
inline std::vector<int> Reference(const GenerateRequest& r,
                                  int (*next)(const std::vector<int>&) = NextToken) {
  std::vector<int> ctx = r.prompt, out;
  while (static_cast<int>(out.size()) < r.sampling.max_tokens) {
    out.push_back(next(ctx));
    ctx.push_back(out.back());
  }
  return out;
}

}  // namespace saturn::testing_sched
