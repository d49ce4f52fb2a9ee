// What the Engine reports about itself (Engine::info(), counters()): plain values, copied out
// under the engine's lock, so a reader on any thread never touches the backend, the runner or
// the scheduler. The runner fills GraphInfo; the engine fills the rest.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/model/model_config.h"
#include "engine/request.h"
#include "kernels/tensor.h"

namespace saturn {

// The captured CUDA graphs.
struct GraphInfo {
  std::vector<int> sizes;  // captured batch sizes, ascending
  double capture_ms = 0;
  size_t memory_bytes = 0;
};

struct KvStats {
  int block_size = 0;
  int num_blocks = 0;
  int blocks_free = 0;
  size_t bytes_per_block = 0;
  DType dtype = DType::kF32;  // of the cached K and V
  size_t capacity_bytes = 0;
};

struct EngineCounters {
  int64_t requests_submitted = 0;
  int64_t requests_finished = 0;  // any reason
  int64_t requests_cancelled = 0;
  int64_t requests_failed = 0;
  int64_t prompt_tokens = 0;            // of finished requests
  int64_t submitted_prompt_tokens = 0;  // of every accepted request, at Submit
  int64_t generation_tokens = 0;
  int64_t preemptions = 0;
  // Prefix caching, in tokens (vLLM's prefix_cache_queries and prefix_cache_hits): looked up
  // when a request is admitted, found cached and taken; with caching off, found and not taken.
  int64_t prefix_cache_queries = 0;
  int64_t prefix_cache_hits = 0;
  int64_t prefix_cache_missed = 0;
  // Speculative decoding (vLLM's spec_decode_num_drafts, _num_draft_tokens, _num_accepted_tokens):
  // verify rows with proposals, tokens proposed, tokens kept.
  int64_t spec_drafts = 0;
  int64_t spec_draft_tokens = 0;
  int64_t spec_accepted_tokens = 0;
  int num_waiting = 0;  // incl. submitted but not yet seen by the loop
  int num_running = 0;
  int64_t steps = 0;
};

struct EngineInfo {
  // Fixed when the engine was created.
  ModelConfig model;
  ModelLimits limits;          // what Submit checks requests against
  int max_num_seqs_limit = 0;  // the upper bounds UpdateOptions accepts
  int max_num_batched_tokens_limit = 0;
  int max_queued_requests = 0;  // 0: unbounded
  std::string backend;          // "cpu" or "cuda"
  std::string device_name;
  DType compute_dtype = DType::kF32;
  DType weight_dtype = DType::kF32;  // of the GEMM weight matrices
  size_t device_memory_bytes = 0;
  bool supports_graphs = false;  // the backend can capture CUDA graphs
  int event_threads = 0;  // threads token events go out on (EngineConfig::event_thread); 0: the
                          // engine thread
  bool async_scheduling = false;        // the overlapped step loop (EngineConfig::async_scheduling)
  bool per_op_timing_is_cheap = false;  // else every Nth eager step is timed per op
  size_t weight_bytes = 0;              // device weights, all of them (this rank's, under TP)
  // Tensor parallelism (EngineConfig::tensor_parallel): ranks, and what carries their
  // collectives; 1 and "" without.
  int tensor_parallel = 1;
  std::string tp_transport;
  std::vector<int> graph_sizes;  // the decode batch sizes graphs are captured at, ascending
  // Now.
  KvStats kv;
  GraphInfo graphs;  // captured so far (empty until graphs are first turned on)
};

}  // namespace saturn
