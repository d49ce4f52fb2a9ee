#include "engine/diag/engine_context.h"

#include <algorithm>
#include <optional>

namespace saturn {

AnalyzerContext ContextFromEngine(const Engine& engine) {
  AnalyzerContext c;
  c.model = engine.model();
  c.dtype_bytes = static_cast<double>(DTypeSize(engine.backend().compute_dtype()));
  c.weight_dtype_bytes = static_cast<double>(DTypeSize(engine.backend().weight_dtype()));
  c.weight_bytes = static_cast<double>(engine.runner().weight_bytes());
  const KvStats kv = engine.kv_stats();
  c.kv_num_blocks = kv.num_blocks;
  c.kv_block_size = kv.block_size;
  c.kv_bytes_per_block = static_cast<double>(kv.bytes_per_block);
  c.max_model_len = engine.limits().max_model_len;
  c.options = engine.options();
  c.max_num_seqs_limit = engine.config().max_num_seqs_limit;
  c.max_num_batched_tokens_limit = engine.config().max_num_batched_tokens_limit;
  c.backend = engine.backend().name();
  c.supports_graphs = engine.backend().SupportsGraphs();
  const GraphInfo graphs = engine.graph_info();
  c.graph_sizes = graphs.sizes;
  if (c.graph_sizes.empty()) {  // not captured yet: the sizes the engine would capture
    c.graph_sizes = engine.config().cuda_graph_sizes;
    if (c.graph_sizes.empty()) {
      c.graph_sizes = {1, 2, 4};
      for (int s = 8; s <= c.max_num_seqs_limit; s += 8) c.graph_sizes.push_back(s);
    }
    std::sort(c.graph_sizes.begin(), c.graph_sizes.end());
  }
  c.graph_memory_bytes = static_cast<double>(graphs.memory_bytes);
  if (const std::optional<StepProbe> probe = engine.step_probe(); probe.has_value()) {
    c.probe_curve = CurveFromProbe(*probe);
    c.probe_context = probe->decode_context;
    c.probe_graphs = probe->graphs;
  }
  const EngineCounters n = engine.counters();
  c.num_waiting = n.num_waiting;
  c.num_running = n.num_running;
  if (n.requests_finished > 0) {
    c.mean_request_tokens =
        static_cast<double>(n.prompt_tokens + n.generation_tokens) / n.requests_finished;
    c.mean_prompt_tokens = static_cast<double>(n.prompt_tokens) / n.requests_finished;
    c.mean_output_tokens = static_cast<double>(n.generation_tokens) / n.requests_finished;
  }
  // Prompts of every accepted request: unlike finished ones, not biased towards the short
  // requests that finish first after a start or a change.
  if (n.requests_submitted > 0) {
    c.mean_prompt_tokens = static_cast<double>(n.submitted_prompt_tokens) / n.requests_submitted;
  }
  return c;
}

}  // namespace saturn
