// The model runner's state, shared by its files (model_runner.cc: inputs, forward, steps and
// graphs; model_runner_setup.cc: weights and buffers; model_runner_logprobs.cc: steps that ask
// for logprobs). Internal to engine/: nothing outside the runner includes it.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "engine/model_runner.h"
#include "kernels/backend.h"

namespace saturn {

// Where each step input lives inside the one packed input buffer (host staging and device
// alike): regions in a fixed order, each 16-byte aligned, sized for this step's counts. The
// offsets depend only on (tokens, seqs, block-table width), so a decode graph captured at a
// batch size reads its inputs where every later step of that size writes them.
struct InputLayout {
  size_t ids, positions, slots, query_start, context_lens, block_tables, sample_rows, temperature,
      top_k, top_p, seed, step, end;
};

// `rows`: the rows that sample (one per sampling sequence, more where it speculates), at most
// the runner's max_seqs.
inline InputLayout LayoutFor(int64_t tokens, int64_t seqs, int64_t rows, int64_t width) {
  InputLayout l{};
  size_t at = 0;
  auto region = [&](size_t* off, int64_t count, size_t elem) {
    *off = at;
    at += (static_cast<size_t>(count) * elem + 15) & ~size_t{15};
  };
  region(&l.seed, rows, 8);
  region(&l.ids, tokens, 4);
  region(&l.positions, tokens, 4);
  region(&l.slots, tokens, 4);
  region(&l.query_start, seqs + 1, 4);
  region(&l.context_lens, seqs, 4);
  region(&l.sample_rows, rows, 4);
  region(&l.temperature, rows, 4);
  region(&l.top_k, rows, 4);
  region(&l.top_p, rows, 4);
  region(&l.step, rows, 4);
  region(&l.block_tables, seqs * width, 4);
  l.end = at;
  return l;
}

// Every weight lives in one device buffer: one allocation (on the CPU, huge pages for the small
// per-layer matrices too) and tensors that are views into it.
struct ModelRunner::DeviceWeights {
  struct Layer {
    Tensor attn_norm_t, wqkv_t, wo_t, mlp_norm_t, w_gate_up_t, w_down_t;  // wqkv: q, k, v rows
  };
  DeviceBuffer arena;
  Tensor embedding_t, final_norm_t, lm_head_t;
  std::vector<Layer> layers;
};

// Device buffers sized for the configured upper bounds, plus their host staging copies. The
// step inputs travel packed: built in the h_* vectors, copied into one host staging buffer
// (page-locked on CUDA) at the step's InputLayout, uploaded with one copy into `inputs`.
struct ModelRunner::Buffers {
  struct HostFree {
    Backend* backend;
    void operator()(void* p) const { backend->FreeHost(p); }
  };
  using HostMemory = std::unique_ptr<void, HostFree>;

  int max_tokens = 0, max_seqs = 0, max_blocks_per_seq = 0;
  DeviceBuffer inputs, tokens;
  HostMemory h_inputs{nullptr, HostFree{nullptr}}, h_tokens{nullptr, HostFree{nullptr}};
  InputLayout layout{};  // of the prepared step
  DeviceBuffer hidden, normed, q, k, v, attn_out, tmp, gate_up, act, gathered, gathered_normed;
  DeviceBuffer logits;        // f32 [max_seqs, vocab] (rank 0; workers hold none)
  DeviceBuffer logits_part;   // f32 [max_seqs, this rank's vocabulary slice] (tensor parallel)
  DeviceBuffer logprob_rows;  // i32 [max_seqs]: hidden rows whose prompt logprobs are asked
  DeviceBuffer kv;            // [layers][K|V][(num_blocks + 1) * block_size, Hkv * hd]
  std::vector<Tensor> k_cache, v_cache;
  // Host staging (kept alive until the next synchronisation point).
  std::vector<int32_t> h_ids, h_positions, h_slots, h_query_start, h_context_lens, h_block_tables,
      h_sample_rows, h_top_k, h_step;
  std::vector<float> h_temperature, h_top_p;
  std::vector<int64_t> h_seed;
  std::vector<int32_t> h_logprob_rows;
  std::vector<uint8_t> h_prefill;      // AttentionBatch::prefill (host only)
  std::vector<int32_t> h_decode_from;  // AttentionBatch::decode_from (host only)
  std::vector<float> h_logits;         // downloaded logits of steps that asked for logprobs
  // Cost-model inputs of the prepared step.
  int64_t attended_pairs = 0, context_tokens = 0;
};

// The step's token count, longest query and longest context.
inline void PlanBounds(const StepPlan& plan, int* num_tokens, int* max_query, int* max_context) {
  *num_tokens = *max_query = *max_context = 0;
  for (const ScheduledSeq& s : plan.seqs) {
    *num_tokens += s.num_new_tokens();
    *max_query = std::max(*max_query, s.num_new_tokens());
    *max_context = std::max(*max_context, s.context_len());
  }
}

}  // namespace saturn
