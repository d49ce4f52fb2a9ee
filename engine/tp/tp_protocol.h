// What rank 0 tells the tensor-parallel workers, one broadcast header at a time (the pattern
// of vLLM's and nano-vllm's executors: rank 0 schedules and samples, workers run the packed
// step it sends). A session is one engine's life:
//   kStart + a JSON payload (TpStartConfig: what to load and the runner's bounds) -> every rank
//     loads its shard and reports by AllGather (0: ready)
//   kStep + the packed step inputs (ModelRunner: staging bytes, prefill flags, decode_from) ->
//     every rank runs the forward pass, meeting at each layer's all-reduce
//   kLogits (num_tokens, sample_rows and the rows) -> after a step, every rank's slice of those
//     rows' logits, gathered on rank 0 (a logprobs step's prompt rows)
//   kCommProbe (payload: the message sizes, int64 floats each) -> every rank runs the same
//     timed all-reduces (calibration of the group's link, ModelRunner::CalibrateAllReduce)
//   kFetch (seq: the first step wanted) -> every worker sends rank 0 its log of the steps since
//     (engine/measure/tp_stats.h), gathered between two steps when a report is built
//   kStop -> the workers free their shard and wait for the next kStart
//   kExit -> the workers leave (saturn-server's rank 0, on its way out)
#pragma once

#include <array>
#include <cstdint>

namespace saturn {

enum class TpMessage : int64_t {
  kStart = 1,
  kStep = 2,
  kStop = 3,
  kExit = 4,
  kFetch = 5,
  kLogits = 6,
  kCommProbe = 7,
};

// One broadcast of fixed size. For kStart: `payload_bytes` only. For kStep: the step's number
// (`seq`), the Forward arguments and the cost-model sums of the step rank 0 prepared. For kFetch:
// `seq`.
struct TpHeader {
  int64_t kind = 0;
  int64_t payload_bytes = 0;
  int64_t seq = 0;
  int64_t num_tokens = 0, num_seqs = 0, sample_rows = 0, max_query = 0, max_context = 0;
  int64_t attended_pairs = 0, context_tokens = 0;
};

}  // namespace saturn
