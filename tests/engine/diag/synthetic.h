// Hand-built step records for the analyzer tests: costs from the shape cost model, times
// from a known "true" step model, so every figure has a known answer. No clocks.
#pragma once

#include <algorithm>
#include <array>

#include "engine/diag/analyzer.h"
#include "engine/diag/step_cost.h"

namespace saturn::testing_diag {

struct TrueModel {
  double host_us = 100;  // per step
  double host_us_per_seq = 0;
  double op_overhead_us = 1;  // inside each op (CPU-style)
  double bytes_per_us = 1e4;  // 10 GB/s, every class
  double flops_per_us = 1e5;  // 100 GFLOP/s, every class
  bool additive = false;      // sum of the terms instead of their max
};

inline Calibration TestCalibration() {
  Calibration c;
  c.backend = "cpu";
  c.device = "test";
  c.dtype = "f32";
  c.gemm_flops_per_s = 1e11;
  c.bandwidth_bytes_per_s = 1e10;
  c.op_dispatch_us = 1;
  c.op_issue_us = 1;
  return c;
}

inline ModelConfig Small() { return *PresetConfig("small"); }

// A model so small that per-step overheads dwarf its work.
inline ModelConfig Micro() {
  ModelConfig m;
  m.name = "micro";
  m.vocab_size = 300;
  m.hidden_size = 32;
  m.intermediate_size = 64;
  m.num_layers = 2;
  m.num_heads = 4;
  m.num_kv_heads = 2;
  m.head_dim = 8;
  m.max_position_embeddings = 256;
  return m;
}

inline AnalyzerContext TestContext(const ModelConfig& m, int max_num_seqs) {
  AnalyzerContext c;
  c.model = m;
  c.dtype_bytes = 4;
  c.kv_block_size = 16;
  c.kv_num_blocks = 100000;
  c.max_model_len = 2048;
  c.options = EngineOptions{max_num_seqs, 2048, false};
  c.max_num_seqs_limit = 256;
  c.max_num_batched_tokens_limit = 8192;
  c.backend = "cpu";
  c.additive_roofline = 0;  // the true model below is the max-form roofline
  return c;
}

struct StepSpec {
  int seqs = 1;
  int prefill_tokens = 0;  // in one chunk starting at position 0
  double context = 100;    // per decoding sequence
  int queue_depth = 0;
  int running = -1;      // -1: = seqs
  int max_num_seqs = 0;  // options recorded on the step (0: seqs)
  int max_num_batched_tokens = 2048;
  double weight_dtype_bytes = 0;  // GEMM weights' bytes per weight where not 4 (bf16, q8_0)
};

// One step starting at `start_us`; returns it with end_us set from the true model.
inline StepRecord MakeStep(const ModelConfig& m, const TrueModel& t, const StepSpec& s,
                           double start_us, int64_t id = 0) {
  const int decodes = s.seqs - (s.prefill_tokens > 0 ? 1 : 0);
  const StepShape shape = s.prefill_tokens > 0
                              ? MixedShape(1, s.prefill_tokens, 0, decodes, s.context, true)
                              : DecodeShape(s.seqs, s.context);
  const StepCost cost = EstimateStepCost(m, 4, shape, s.weight_dtype_bytes);
  StepRecord r;
  r.step_id = id;
  r.start_us = start_us;
  r.per_op_timed = true;
  double device = 0;
  for (size_t c = 0; c < kNumOpClasses; ++c) {
    OpClassStats& o = r.by_class[c];
    o.count = cost[c].ops;
    o.flops = cost[c].flops;
    o.bytes = cost[c].bytes;
    const double mem = o.bytes / t.bytes_per_us, cmp = o.flops / t.flops_per_us;
    o.device_us = o.count * t.op_overhead_us + (t.additive ? mem + cmp : std::max(mem, cmp));
    device += o.device_us;
    r.op_count += o.count;
  }
  const double host = t.host_us + t.host_us_per_seq * s.seqs;
  r.schedule_us = host * 0.2;
  r.prepare_us = host * 0.5;
  r.postprocess_us = host * 0.3;
  r.issue_us = device;
  r.device_busy_us = device;
  r.device_span_us = device;
  r.end_us = start_us + host + device;
  r.num_seqs = s.seqs;
  r.num_prefill_tokens = s.prefill_tokens;
  r.num_decode_tokens = decodes;
  r.num_sampled = s.seqs;
  r.context_tokens = shape.context_tokens;
  r.queue_depth = s.queue_depth;
  r.num_running = s.running >= 0 ? s.running : s.seqs;
  r.kv_blocks_used = s.seqs * 8;
  r.kv_blocks_free = 1000;
  r.options =
      EngineOptions{s.max_num_seqs > 0 ? s.max_num_seqs : s.seqs, s.max_num_batched_tokens, false};
  return r;
}

// `n` back-to-back steps (gap_us between them), first at t = 0.
inline std::vector<StepRecord> Steps(const ModelConfig& m, const TrueModel& t, const StepSpec& s,
                                     int n, double gap_us = 0, double start_us = 0) {
  std::vector<StepRecord> v;
  double at = start_us;
  for (int i = 0; i < n; ++i) {
    v.push_back(MakeStep(m, t, s, at, i));
    at = v.back().end_us + gap_us;
  }
  return v;
}

}  // namespace saturn::testing_diag
