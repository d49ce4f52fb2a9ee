// The model runner's set-up: the weights in one device arena and the step buffers at their
// upper bounds (model_runner.h).
#include <algorithm>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/model_runner.h"
#include "engine/model_runner_state.h"
#include "engine/tp/tp_shard.h"
#include "kernels/base/status_macros.h"
#include "kernels/quant_blocks.h"

namespace saturn {

size_t ModelRunner::KvBytesPerBlock(const ModelConfig& m, int block_size, DType dtype,
                                    int tp_size) {
  return 2ull * m.num_layers * block_size * (m.num_kv_heads / std::max(1, tp_size)) * m.head_dim *
         DTypeSize(dtype);
}

absl::StatusOr<std::unique_ptr<ModelRunner>> ModelRunner::Create(Backend* backend,
                                                                 const ModelWeights& weights,
                                                                 const RunnerConfig& config) {
  if (config.num_kv_blocks <= 0) {
    return absl::InvalidArgumentError("num_kv_blocks: must be positive");
  }
  if (config.max_model_len > weights.config.max_position_embeddings) {
    return absl::InvalidArgumentError(absl::StrCat("max_model_len: ", config.max_model_len,
                                                   " exceeds the model's context of ",
                                                   weights.config.max_position_embeddings));
  }
  if (config.tp_size > 1) {
    RETURN_IF_ERROR(CheckTensorParallel(weights.config, config.tp_size));
    const Communicator* comm = backend->communicator();
    if (comm == nullptr || comm->size() != config.tp_size || comm->rank() != config.tp_rank) {
      return absl::FailedPreconditionError(absl::StrCat(
          "tensor_parallel: rank ", config.tp_rank, " of ", config.tp_size,
          " needs the backend's communicator to be that group's (it has ",
          comm == nullptr ? "none" : absl::StrCat("rank ", comm->rank(), " of ", comm->size()),
          ")"));
    }
  }
  std::unique_ptr<ModelRunner> r(new ModelRunner(backend, weights.config, config));
  RETURN_IF_ERROR(r->UploadWeights(weights));
  RETURN_IF_ERROR(r->AllocateBuffers());
  return r;
}

absl::Status ModelRunner::UploadWeights(const ModelWeights& w) {
  // GEMM matrices in the backend's weight dtype and GEMM weight layout; norms and the
  // embedding table (gathered into activations) in its compute dtype, row-major. First the
  // layout of the one arena, then the copies.
  const DType act = backend_->compute_dtype(), wdt = backend_->weight_dtype();
  const Layout wlayout = backend_->GemmWeightLayout(wdt);
  struct Placed {
    const std::vector<float>* host;
    Tensor* view;
    Tensor shape;  // data unset
    size_t offset;
  };
  std::vector<Placed> placed;
  size_t arena_bytes = 0;
  auto place_as = [&](DType dt, Layout layout, const std::vector<float>& host, int64_t rows,
                      int64_t cols, Tensor* view) -> absl::Status {
    if (static_cast<int64_t>(host.size()) != rows * cols) {
      return absl::InvalidArgumentError(
          absl::StrCat("weights: expected ", rows, "x", cols, " values, got ", host.size()));
    }
    const Tensor shape{nullptr, dt, rows, cols, layout};
    placed.push_back({&host, view, shape, arena_bytes});
    constexpr size_t kAlign = 256;  // a cache line on the CPU, cuBLAS's preferred on CUDA
    arena_bytes += (shape.bytes() + kAlign - 1) / kAlign * kAlign;
    return absl::OkStatus();
  };
  // Block-quantized weights (q8_0, q4_0): a matrix whose rows are not whole blocks stays in
  // the compute dtype, as llama.cpp's quantizer falls back for such tensors.
  std::vector<std::string> unquantized;
  auto place_in = [&](DType dt, const std::vector<float>& host, int64_t rows, int64_t cols,
                      Tensor* view, const char* what) {
    if (IsBlockQuantized(dt) && cols % DTypeBlockElems(dt) != 0) {
      unquantized.push_back(absl::StrCat(what, " (", cols, " columns)"));
      return place_as(act, Layout::kRows, host, rows, cols, view);
    }
    return place_as(dt, backend_->GemmWeightLayout(dt), host, rows, cols, view);
  };
  auto place = [&](const std::vector<float>& host, int64_t rows, int64_t cols, Tensor* view,
                   const char* what) { return place_in(wdt, host, rows, cols, view, what); };
  const ModelConfig& m = shard_;  // this rank's heads and SwiGLU width
  const int64_t d = m.hidden_size, hq = int64_t{m.num_heads} * m.head_dim,
                hkv = int64_t{m.num_kv_heads} * m.head_dim, f = m.intermediate_size;
  weights_ = std::make_unique<DeviceWeights>();
  DeviceWeights& dw = *weights_;
  // A tied LM head shares the embedding table where the GEMM reads the compute dtype, in the
  // GEMM's layout (Backend::Embedding reads that too).
  // Under tensor parallelism each rank holds its vocabulary slice of the head (ShardWeights
  // puts it in lm_head, tied or not), never the embedding itself.
  const bool shared_head = m.tie_word_embeddings && wdt == act && config_.tp_size == 1;
  const int64_t head_rows = config_.tp_size > 1
                                ? VocabCounts(m.vocab_size, config_.tp_size)[config_.tp_rank]
                                : m.vocab_size;
  RETURN_IF_ERROR(place_as(act, shared_head ? wlayout : Layout::kRows, w.embedding, m.vocab_size, d,
                           &dw.embedding_t));
  RETURN_IF_ERROR(place_as(act, Layout::kRows, w.final_norm, 1, d, &dw.final_norm_t));
  if (!shared_head) {  // untied, a slice, or tied but the GEMM wants its own copy
    const std::vector<float>& head =
        m.tie_word_embeddings && config_.tp_size == 1 ? w.embedding : w.lm_head;
    RETURN_IF_ERROR(place_in(LmHeadDType(wdt), head, head_rows, d, &dw.lm_head_t, "lm_head"));
  }
  dw.layers.resize(m.num_layers);
  for (int l = 0; l < m.num_layers; ++l) {
    const LayerWeights& lw = w.layers[l];
    DeviceWeights::Layer& L = dw.layers[l];
    RETURN_IF_ERROR(place_as(act, Layout::kRows, lw.attn_norm, 1, d, &L.attn_norm_t));
    RETURN_IF_ERROR(place(lw.wqkv, hq + 2 * hkv, d, &L.wqkv_t, "wqkv"));
    RETURN_IF_ERROR(place(lw.wo, d, hq, &L.wo_t, "wo"));
    RETURN_IF_ERROR(place_as(act, Layout::kRows, lw.mlp_norm, 1, d, &L.mlp_norm_t));
    RETURN_IF_ERROR(place(lw.w_gate_up, 2 * f, d, &L.w_gate_up_t, "w_gate_up"));
    RETURN_IF_ERROR(place(lw.w_down, d, f, &L.w_down_t, "w_down"));
  }
  if (!unquantized.empty()) {
    // One line, each kind of matrix once (every layer has the same shapes).
    std::sort(unquantized.begin(), unquantized.end());
    unquantized.erase(std::unique(unquantized.begin(), unquantized.end()), unquantized.end());
    std::cerr << "saturn: " << DTypeName(wdt) << " needs rows of whole blocks of "
              << DTypeBlockElems(wdt) << "; kept in " << DTypeName(act) << ": "
              << absl::StrJoin(unquantized, ", ") << "\n";
  }
  ASSIGN_OR_RETURN(dw.arena, backend_->Allocate(std::max<size_t>(arena_bytes, 1)));
  for (const Placed& p : placed) {
    *p.view = dw.arena.View(p.shape.dtype, p.shape.rows, p.shape.cols, p.offset);
    p.view->layout = p.shape.layout;
    weight_bytes_ +=
        static_cast<size_t>(p.view->rows) * DTypeRowBytes(p.view->dtype, p.view->cols);  // unpadded
    RETURN_IF_ERROR(backend_->UploadF32(p.host->data(), *p.view));
  }
  if (shared_head) dw.lm_head_t = dw.embedding_t;
  return backend_->Synchronize();  // host vectors may go away after this
}

absl::Status ModelRunner::AllocateBuffers() {
  buf_ = std::make_unique<Buffers>();
  Buffers& b = *buf_;
  const ModelConfig& m = shard_;
  const DType dt = backend_->compute_dtype();
  b.max_tokens = config_.max_num_batched_tokens_limit;
  b.max_seqs = config_.max_num_seqs_limit;
  b.max_blocks_per_seq = (config_.max_model_len + config_.block_size - 1) / config_.block_size;
  const int64_t T = b.max_tokens, S = b.max_seqs, d = m.hidden_size,
                hq = int64_t{m.num_heads} * m.head_dim, hkv = int64_t{m.num_kv_heads} * m.head_dim,
                f = m.intermediate_size;
  auto alloc = [&](DeviceBuffer* buf, int64_t elems, DType t) -> absl::Status {
    ASSIGN_OR_RETURN(
        *buf, backend_->Allocate(static_cast<size_t>(std::max<int64_t>(elems, 1)) * DTypeSize(t)));
    return absl::OkStatus();
  };
  const size_t input_bytes = LayoutFor(T, S, S, b.max_blocks_per_seq).end;
  ASSIGN_OR_RETURN(b.inputs, backend_->Allocate(input_bytes));
  RETURN_IF_ERROR(alloc(&b.tokens, S, DType::kI32));
  ASSIGN_OR_RETURN(void* h_in, backend_->AllocateHost(input_bytes));
  b.h_inputs = Buffers::HostMemory(h_in, Buffers::HostFree{backend_});
  ASSIGN_OR_RETURN(void* h_tok, backend_->AllocateHost(static_cast<size_t>(S) * sizeof(int32_t)));
  b.h_tokens = Buffers::HostMemory(h_tok, Buffers::HostFree{backend_});
  RETURN_IF_ERROR(alloc(&b.hidden, T * d, dt));
  RETURN_IF_ERROR(alloc(&b.normed, T * d, dt));
  RETURN_IF_ERROR(alloc(&b.q, T * hq, dt));
  RETURN_IF_ERROR(alloc(&b.k, T * hkv, dt));
  RETURN_IF_ERROR(alloc(&b.v, T * hkv, dt));
  RETURN_IF_ERROR(alloc(&b.attn_out, T * hq, dt));
  RETURN_IF_ERROR(alloc(&b.tmp, T * d, dt));
  RETURN_IF_ERROR(alloc(&b.gate_up, T * 2 * f, dt));
  RETURN_IF_ERROR(alloc(&b.act, T * f, dt));
  RETURN_IF_ERROR(alloc(&b.gathered, S * d, dt));
  RETURN_IF_ERROR(alloc(&b.gathered_normed, S * d, dt));
  RETURN_IF_ERROR(alloc(&b.logits, tp_worker() ? 1 : S * int64_t{m.vocab_size}, DType::kF32));
  if (config_.tp_size > 1) {
    const int64_t slice = VocabCounts(m.vocab_size, config_.tp_size)[config_.tp_rank];
    RETURN_IF_ERROR(alloc(&b.logits_part, S * slice, DType::kF32));
  }
  RETURN_IF_ERROR(alloc(&b.logprob_rows, S, DType::kI32));
  // KV cache: one extra block (id num_kv_blocks) absorbs graph padding rows.
  const int64_t cache_rows = int64_t{config_.num_kv_blocks + 1} * config_.block_size;
  const DType kv_dt = backend_->kv_cache_dtype();
  const size_t layer_bytes = static_cast<size_t>(cache_rows * hkv) * DTypeSize(kv_dt);
  kv_cache_bytes_ = 2 * layer_bytes * m.num_layers;
  auto kv = backend_->Allocate(kv_cache_bytes_);
  if (!kv.ok()) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "kv cache: cannot allocate ", kv_cache_bytes_ >> 20, " MiB for ", config_.num_kv_blocks,
        " blocks (", kv.status().message(), "); lower --kv_cache_mb"));
  }
  b.kv = std::move(*kv);
  // Committed and zeroed now: never-written KV rows otherwise read as one cached zero page (a
  // probe step's attention over them ran ~20 % faster than over served KV), the first pass of
  // serving through the cache would pay its page faults, and padding rows read zeros.
  RETURN_IF_ERROR(backend_->Zero(b.kv.View(DType::kI32, 1, int64_t(kv_cache_bytes_ / 4))));
  for (int l = 0; l < m.num_layers; ++l) {
    b.k_cache.push_back(b.kv.View(kv_dt, cache_rows, hkv, (2 * l) * layer_bytes));
    b.v_cache.push_back(b.kv.View(kv_dt, cache_rows, hkv, (2 * l + 1) * layer_bytes));
  }
  b.h_block_tables.assign(S * b.max_blocks_per_seq, config_.num_kv_blocks);
  return absl::OkStatus();
}

}  // namespace saturn
