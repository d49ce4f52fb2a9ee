// Logprobs of one logits row on the host: log_softmax of the raw logits (no temperature,
// top-k or top-p), the given token's logprob and rank, and the top-N alternatives. The model
// runner downloads the rows of the requests that ask (only those) and calls this; the
// device's sampling path is never involved, so the tokens drawn cannot change.
#pragma once

#include "engine/request.h"

namespace saturn {

// `logits` holds `vocab` raw f32 logits. `token` in [0, vocab); `top_n` in [0, kMaxLogprobs].
// Sums run in double, so the result matches a float64 reference to the logits' precision.
PositionLogprobs ComputeLogprobs(const float* logits, int vocab, int token, int top_n);

}  // namespace saturn
