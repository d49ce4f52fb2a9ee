#include "engine/diag/engine_context.h"

#include <optional>

namespace saturn {

AnalyzerContext ContextFromEngine(const Engine& engine) {
  AnalyzerContext c;
  const EngineInfo info = engine.info();
  c.model = info.model;
  c.dtype_bytes = static_cast<double>(DTypeSize(info.compute_dtype));
  c.weight_dtype_bytes = DTypeBytesPerElement(info.weight_dtype);  // q8_0: 34 / 32
  c.kv_dtype_bytes = static_cast<double>(DTypeSize(info.kv.dtype));
  c.weight_bytes = static_cast<double>(info.weight_bytes);
  c.kv_num_blocks = info.kv.num_blocks;
  c.kv_block_size = info.kv.block_size;
  c.kv_bytes_per_block = static_cast<double>(info.kv.bytes_per_block);
  c.max_model_len = info.limits.max_model_len;
  c.options = engine.options();
  c.max_num_seqs_limit = info.max_num_seqs_limit;
  c.max_num_batched_tokens_limit = info.max_num_batched_tokens_limit;
  c.backend = info.backend;
  c.supports_graphs = info.supports_graphs;
  c.event_thread = info.event_threads > 0;
  c.async_scheduling = info.async_scheduling;
  // The captured sizes; before any capture, the sizes the engine would capture.
  c.graph_sizes = info.graphs.sizes.empty() ? info.graph_sizes : info.graphs.sizes;
  c.graph_memory_bytes = static_cast<double>(info.graphs.memory_bytes);
  if (const std::optional<StepProbe> probe = engine.step_probe(); probe.has_value()) {
    c.probe_curve = CurveFromProbe(*probe);
    c.probe_context = probe->decode_context;
    c.probe_context_slopes = ContextSlopes(*probe);
    c.probe_graphs = probe->graphs;
    for (const ProbeSeries& s : probe->series) {
      if (s.prefill || s.after_prefill || AtLongContext(*probe, s) || s.sampling_us <= 0) continue;
      const double rows = double(s.rows) * double(s.wall_us.size());
      c.probe_sampling.push_back(
          CurvePoint{double(s.rows), s.sampling_us / rows, 0, static_cast<int>(s.wall_us.size())});
    }
    if (!probe->other_graphs.empty()) {
      StepProbe other = *probe;
      other.series = probe->other_graphs;
      other.long_context = 0;
      c.probe_curve_other_graphs = CurveFromProbe(other);
    }
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
