// The model runner: StepPlan -> flat inputs -> backend ops -> sampled tokens. See the header
// for the per-step op sequence and the graph rules.
#include "engine/model_runner.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "kernels/op_cost.h"
#include "kernels/status_macros.h"

namespace saturn {
namespace {

double HostUs() {
  return std::chrono::duration<double, std::micro>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

struct ModelRunner::DeviceWeights {
  struct Layer {
    DeviceBuffer attn_norm, wqkv, wo, mlp_norm, w_gate_up, w_down;
    Tensor attn_norm_t, wq, wk, wv, wo_t, mlp_norm_t, w_gate_up_t, w_down_t;
  };
  DeviceBuffer embedding, final_norm, lm_head;
  Tensor embedding_t, final_norm_t, lm_head_t;
  std::vector<Layer> layers;
};

// Device buffers sized for the configured upper bounds, plus their host staging copies.
struct ModelRunner::Buffers {
  int max_tokens = 0, max_seqs = 0, max_blocks_per_seq = 0;
  DeviceBuffer ids, positions, slots, query_start, context_lens, block_tables, sample_rows;
  DeviceBuffer temperature, top_k, top_p, seed, step, tokens;
  DeviceBuffer hidden, normed, q, k, v, attn_out, tmp, gate_up, act, gathered, gathered_normed;
  DeviceBuffer logits;
  DeviceBuffer kv;  // [layers][K|V][(num_blocks + 1) * block_size, Hkv * hd]
  std::vector<Tensor> k_cache, v_cache;
  // Host staging (kept alive until the next synchronisation point).
  std::vector<int32_t> h_ids, h_positions, h_slots, h_query_start, h_context_lens, h_block_tables,
      h_sample_rows, h_top_k, h_step, h_tokens;
  std::vector<float> h_temperature, h_top_p;
  std::vector<int64_t> h_seed;
  // Cost-model inputs of the prepared step.
  int64_t attended_pairs = 0, context_tokens = 0;
};

ModelRunner::ModelRunner(Backend* backend, const ModelConfig& model, const RunnerConfig& config)
    : backend_(backend), model_(model), config_(config) {}

ModelRunner::~ModelRunner() = default;

size_t ModelRunner::KvBytesPerBlock(const ModelConfig& m, int block_size, DType dtype) {
  return 2ull * m.num_layers * block_size * m.num_kv_heads * m.head_dim * DTypeSize(dtype);
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
  std::unique_ptr<ModelRunner> r(new ModelRunner(backend, weights.config, config));
  RETURN_IF_ERROR(r->UploadWeights(weights));
  RETURN_IF_ERROR(r->AllocateBuffers());
  return r;
}

absl::Status ModelRunner::UploadWeights(const ModelWeights& w) {
  // GEMM matrices in the backend's weight dtype; norms and the embedding table (gathered
  // into activations) in its compute dtype.
  const DType act = backend_->compute_dtype(), wdt = backend_->weight_dtype();
  auto upload_as = [&](DType dt, const std::vector<float>& host, int64_t rows, int64_t cols,
                       DeviceBuffer* buf, Tensor* view) -> absl::Status {
    if (static_cast<int64_t>(host.size()) != rows * cols) {
      return absl::InvalidArgumentError(
          absl::StrCat("weights: expected ", rows, "x", cols, " values, got ", host.size()));
    }
    ASSIGN_OR_RETURN(*buf, backend_->Allocate(static_cast<size_t>(rows * cols) * DTypeSize(dt)));
    *view = buf->View(dt, rows, cols);
    weight_bytes_ += view->bytes();
    RETURN_IF_ERROR(backend_->UploadF32(host.data(), *view));
    return backend_->Synchronize();  // host vectors may go away after this
  };
  auto upload = [&](const std::vector<float>& host, int64_t rows, int64_t cols, DeviceBuffer* buf,
                    Tensor* view) { return upload_as(wdt, host, rows, cols, buf, view); };
  const ModelConfig& m = model_;
  const int64_t d = m.hidden_size, hq = int64_t{m.num_heads} * m.head_dim,
                hkv = int64_t{m.num_kv_heads} * m.head_dim, f = m.intermediate_size;
  weights_ = std::make_unique<DeviceWeights>();
  DeviceWeights& dw = *weights_;
  RETURN_IF_ERROR(upload_as(act, w.embedding, m.vocab_size, d, &dw.embedding, &dw.embedding_t));
  RETURN_IF_ERROR(upload_as(act, w.final_norm, 1, d, &dw.final_norm, &dw.final_norm_t));
  if (m.tie_word_embeddings && wdt == act) {
    dw.lm_head_t = dw.embedding_t;
  } else {  // untied, or tied but the GEMM wants its own copy in the weight dtype
    const std::vector<float>& head = m.tie_word_embeddings ? w.embedding : w.lm_head;
    RETURN_IF_ERROR(upload(head, m.vocab_size, d, &dw.lm_head, &dw.lm_head_t));
  }
  dw.layers.resize(m.num_layers);
  for (int l = 0; l < m.num_layers; ++l) {
    const LayerWeights& lw = w.layers[l];
    DeviceWeights::Layer& L = dw.layers[l];
    Tensor wqkv;
    RETURN_IF_ERROR(upload_as(act, lw.attn_norm, 1, d, &L.attn_norm, &L.attn_norm_t));
    RETURN_IF_ERROR(upload(lw.wqkv, hq + 2 * hkv, d, &L.wqkv, &wqkv));
    L.wq = wqkv.RowSlice(0, hq);
    L.wk = wqkv.RowSlice(hq, hkv);
    L.wv = wqkv.RowSlice(hq + hkv, hkv);
    RETURN_IF_ERROR(upload(lw.wo, d, hq, &L.wo, &L.wo_t));
    RETURN_IF_ERROR(upload_as(act, lw.mlp_norm, 1, d, &L.mlp_norm, &L.mlp_norm_t));
    RETURN_IF_ERROR(upload(lw.w_gate_up, 2 * f, d, &L.w_gate_up, &L.w_gate_up_t));
    RETURN_IF_ERROR(upload(lw.w_down, d, f, &L.w_down, &L.w_down_t));
  }
  return absl::OkStatus();
}

absl::Status ModelRunner::AllocateBuffers() {
  buf_ = std::make_unique<Buffers>();
  Buffers& b = *buf_;
  const ModelConfig& m = model_;
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
  RETURN_IF_ERROR(alloc(&b.ids, T, DType::kI32));
  RETURN_IF_ERROR(alloc(&b.positions, T, DType::kI32));
  RETURN_IF_ERROR(alloc(&b.slots, T, DType::kI32));
  RETURN_IF_ERROR(alloc(&b.query_start, S + 1, DType::kI32));
  RETURN_IF_ERROR(alloc(&b.context_lens, S, DType::kI32));
  RETURN_IF_ERROR(alloc(&b.block_tables, S * b.max_blocks_per_seq, DType::kI32));
  RETURN_IF_ERROR(alloc(&b.sample_rows, S, DType::kI32));
  RETURN_IF_ERROR(alloc(&b.temperature, S, DType::kF32));
  RETURN_IF_ERROR(alloc(&b.top_k, S, DType::kI32));
  RETURN_IF_ERROR(alloc(&b.top_p, S, DType::kF32));
  RETURN_IF_ERROR(alloc(&b.seed, S, DType::kI64));
  RETURN_IF_ERROR(alloc(&b.step, S, DType::kI32));
  RETURN_IF_ERROR(alloc(&b.tokens, S, DType::kI32));
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
  RETURN_IF_ERROR(alloc(&b.logits, S * int64_t{m.vocab_size}, DType::kF32));
  // KV cache: one extra block (id num_kv_blocks) absorbs graph padding rows.
  const int64_t cache_rows = int64_t{config_.num_kv_blocks + 1} * config_.block_size;
  const size_t layer_bytes = static_cast<size_t>(cache_rows * hkv) * DTypeSize(dt);
  kv_cache_bytes_ = 2 * layer_bytes * m.num_layers;
  auto kv = backend_->Allocate(kv_cache_bytes_);
  if (!kv.ok()) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "kv cache: cannot allocate ", kv_cache_bytes_ >> 20, " MiB for ", config_.num_kv_blocks,
        " blocks (", kv.status().message(), "); lower --kv_cache_mb"));
  }
  b.kv = std::move(*kv);
  for (int l = 0; l < m.num_layers; ++l) {
    b.k_cache.push_back(b.kv.View(dt, cache_rows, hkv, (2 * l) * layer_bytes));
    b.v_cache.push_back(b.kv.View(dt, cache_rows, hkv, (2 * l + 1) * layer_bytes));
  }
  b.h_block_tables.assign(S * b.max_blocks_per_seq, config_.num_kv_blocks);
  return absl::OkStatus();
}

absl::StatusOr<int> ModelRunner::PrepareInputs(const StepPlan& plan, int padded_seqs) {
  Buffers& b = *buf_;
  const int n = static_cast<int>(plan.seqs.size());
  const int num_seqs = std::max(n, padded_seqs);
  int num_tokens = 0;
  for (const ScheduledSeq& s : plan.seqs) num_tokens += s.num_new_tokens();
  num_tokens += num_seqs - n;  // one token per padding row
  if (num_seqs > b.max_seqs || num_tokens > b.max_tokens) {
    return absl::InvalidArgumentError(absl::StrCat("step of ", num_seqs, " sequences and ",
                                                   num_tokens, " tokens exceeds the runner's ",
                                                   b.max_seqs, "/", b.max_tokens, " limits"));
  }
  const int bs = config_.block_size, width = b.max_blocks_per_seq, scratch = config_.num_kv_blocks;
  b.h_ids.assign(num_tokens, 0);
  b.h_positions.assign(num_tokens, 0);
  b.h_slots.assign(num_tokens, scratch * bs);
  b.h_query_start.assign(num_seqs + 1, 0);
  b.h_context_lens.assign(num_seqs, 1);
  b.h_sample_rows.clear();
  b.h_temperature.clear();
  b.h_top_k.clear();
  b.h_top_p.clear();
  b.h_seed.clear();
  b.h_step.clear();
  b.attended_pairs = 0;
  b.context_tokens = 0;
  int t = 0;
  for (int i = 0; i < num_seqs; ++i) {
    b.h_query_start[i] = t;
    int32_t* table = &b.h_block_tables[static_cast<size_t>(i) * width];
    if (i >= n) {  // padding row: one token in the scratch block, greedy
      std::fill(table, table + width, scratch);
      b.h_sample_rows.push_back(t);
      b.h_temperature.push_back(0.f);
      b.h_top_k.push_back(0);
      b.h_top_p.push_back(1.f);
      b.h_seed.push_back(0);
      b.h_step.push_back(0);
      ++t;
      continue;
    }
    const ScheduledSeq& s = plan.seqs[i];
    if (static_cast<int>(s.block_table.size()) > width ||
        s.context_len() > static_cast<int>(s.block_table.size()) * bs) {
      return absl::InternalError(
          absl::StrCat("request ", s.request_id, ": block table does not cover its context"));
    }
    std::copy(s.block_table.begin(), s.block_table.end(), table);
    std::fill(table + s.block_table.size(), table + width, scratch);
    for (int j = 0; j < s.num_new_tokens(); ++j, ++t) {
      const int pos = s.start_position + j;
      b.h_ids[t] = s.token_ids[j];
      b.h_positions[t] = pos;
      b.h_slots[t] = s.block_table[pos / bs] * bs + pos % bs;
      b.attended_pairs += pos + 1;
    }
    b.h_context_lens[i] = s.context_len();
    b.context_tokens += s.context_len();
    if (s.sample) {
      b.h_sample_rows.push_back(t - 1);
      b.h_temperature.push_back(s.sampling.temperature);
      b.h_top_k.push_back(s.sampling.top_k);
      b.h_top_p.push_back(s.sampling.top_p);
      b.h_seed.push_back(s.sampling.seed);
      b.h_step.push_back(s.sample_step);
    }
  }
  b.h_query_start[num_seqs] = t;
  const int r = static_cast<int>(b.h_sample_rows.size());
  auto up = [&](const void* host, const DeviceBuffer& dst, DType dt, int64_t count) {
    return count == 0 ? absl::OkStatus() : backend_->Upload(host, dst.View(dt, 1, count));
  };
  RETURN_IF_ERROR(up(b.h_ids.data(), b.ids, DType::kI32, num_tokens));
  RETURN_IF_ERROR(up(b.h_positions.data(), b.positions, DType::kI32, num_tokens));
  RETURN_IF_ERROR(up(b.h_slots.data(), b.slots, DType::kI32, num_tokens));
  RETURN_IF_ERROR(up(b.h_query_start.data(), b.query_start, DType::kI32, num_seqs + 1));
  RETURN_IF_ERROR(up(b.h_context_lens.data(), b.context_lens, DType::kI32, num_seqs));
  RETURN_IF_ERROR(
      up(b.h_block_tables.data(), b.block_tables, DType::kI32, int64_t{num_seqs} * width));
  RETURN_IF_ERROR(up(b.h_sample_rows.data(), b.sample_rows, DType::kI32, r));
  RETURN_IF_ERROR(up(b.h_temperature.data(), b.temperature, DType::kF32, r));
  RETURN_IF_ERROR(up(b.h_top_k.data(), b.top_k, DType::kI32, r));
  RETURN_IF_ERROR(up(b.h_top_p.data(), b.top_p, DType::kF32, r));
  RETURN_IF_ERROR(up(b.h_seed.data(), b.seed, DType::kI64, r));
  RETURN_IF_ERROR(up(b.h_step.data(), b.step, DType::kI32, r));
  return r;
}

absl::Status ModelRunner::Forward(int num_tokens, int num_seqs, int num_sample_rows,
                                  int max_query_len, int max_context_len, bool keep_logits) {
  Buffers& b = *buf_;
  const DeviceWeights& w = *weights_;
  const ModelConfig& m = model_;
  const DType dt = backend_->compute_dtype();
  const int64_t T = num_tokens, R = num_sample_rows, d = m.hidden_size,
                hq = int64_t{m.num_heads} * m.head_dim, hkv = int64_t{m.num_kv_heads} * m.head_dim,
                f = m.intermediate_size;
  const Tensor ids = b.ids.View(DType::kI32, 1, T);
  const Tensor positions = b.positions.View(DType::kI32, 1, T);
  const Tensor slots = b.slots.View(DType::kI32, 1, T);
  const Tensor hidden = b.hidden.View(dt, T, d), normed = b.normed.View(dt, T, d),
               tmp = b.tmp.View(dt, T, d), q = b.q.View(dt, T, hq), k = b.k.View(dt, T, hkv),
               v = b.v.View(dt, T, hkv), attn_out = b.attn_out.View(dt, T, hq),
               gate_up = b.gate_up.View(dt, T, 2 * f), act = b.act.View(dt, T, f);
  AttentionBatch batch;
  batch.query_start = b.query_start.View(DType::kI32, 1, num_seqs + 1);
  batch.context_lens = b.context_lens.View(DType::kI32, 1, num_seqs);
  batch.block_tables = b.block_tables.View(DType::kI32, num_seqs, b.max_blocks_per_seq);
  batch.num_seqs = num_seqs;
  batch.max_query_len = max_query_len;
  batch.max_context_len = max_context_len;
  batch.attended_pairs = b.attended_pairs;
  batch.context_tokens = b.context_tokens;
  AttentionShape shape;
  shape.num_heads = m.num_heads;
  shape.num_kv_heads = m.num_kv_heads;
  shape.head_dim = m.head_dim;
  shape.block_size = config_.block_size;
  shape.scale = 1.0f / std::sqrt(static_cast<float>(m.head_dim));

  RETURN_IF_ERROR(backend_->Embedding(ids, w.embedding_t, hidden));
  for (int l = 0; l < m.num_layers; ++l) {
    const DeviceWeights::Layer& L = w.layers[l];
    if (l == 0) {
      RETURN_IF_ERROR(backend_->RmsNorm(hidden, L.attn_norm_t, m.rms_norm_eps, normed));
    } else {  // hidden += previous layer's MLP output
      RETURN_IF_ERROR(backend_->AddRmsNorm(tmp, hidden, L.attn_norm_t, m.rms_norm_eps, normed));
    }
    RETURN_IF_ERROR(backend_->Gemm(normed, L.wq, q));
    RETURN_IF_ERROR(backend_->Gemm(normed, L.wk, k));
    RETURN_IF_ERROR(backend_->Gemm(normed, L.wv, v));
    RETURN_IF_ERROR(backend_->Rope(q, k, positions, m.head_dim, m.rope_theta));
    RETURN_IF_ERROR(backend_->KvWrite(k, v, slots, b.k_cache[l], b.v_cache[l]));
    RETURN_IF_ERROR(backend_->Attention(q, b.k_cache[l], b.v_cache[l], batch, shape, attn_out));
    RETURN_IF_ERROR(backend_->Gemm(attn_out, L.wo_t, tmp));
    RETURN_IF_ERROR(backend_->AddRmsNorm(tmp, hidden, L.mlp_norm_t, m.rms_norm_eps, normed));
    RETURN_IF_ERROR(backend_->Gemm(normed, L.w_gate_up_t, gate_up));
    RETURN_IF_ERROR(backend_->SwiGlu(gate_up, act));
    RETURN_IF_ERROR(backend_->Gemm(act, L.w_down_t, tmp));
  }
  if (R == 0) return absl::OkStatus();
  const Tensor gathered = b.gathered.View(dt, R, d),
               gathered_normed = b.gathered_normed.View(dt, R, d);
  const Tensor gathered_tmp = b.gate_up.View(dt, R, d);  // gate_up is free again here
  const Tensor rows = b.sample_rows.View(DType::kI32, 1, R);
  RETURN_IF_ERROR(backend_->GatherRows(hidden, rows, gathered));
  RETURN_IF_ERROR(backend_->GatherRows(tmp, rows, gathered_tmp));
  RETURN_IF_ERROR(backend_->AddRmsNorm(gathered_tmp, gathered, w.final_norm_t, m.rms_norm_eps,
                                       gathered_normed));
  const Tensor logits = b.logits.View(DType::kF32, R, m.vocab_size);
  RETURN_IF_ERROR(backend_->Gemm(gathered_normed, w.lm_head_t, logits));
  if (keep_logits) return absl::OkStatus();
  SamplingBatch sp;
  sp.temperature = b.temperature.View(DType::kF32, 1, R);
  sp.top_k = b.top_k.View(DType::kI32, 1, R);
  sp.top_p = b.top_p.View(DType::kF32, 1, R);
  sp.seed = b.seed.View(DType::kI64, 1, R);
  sp.step = b.step.View(DType::kI32, 1, R);
  return backend_->Sample(logits, sp, b.tokens.View(DType::kI32, 1, R));
}

namespace {

bool IsUniformDecode(const StepPlan& plan) {
  if (plan.seqs.empty()) return false;
  for (const ScheduledSeq& s : plan.seqs) {
    if (s.num_new_tokens() != 1 || !s.sample) return false;
  }
  return true;
}

void PlanBounds(const StepPlan& plan, int* num_tokens, int* max_query, int* max_context) {
  *num_tokens = *max_query = *max_context = 0;
  for (const ScheduledSeq& s : plan.seqs) {
    *num_tokens += s.num_new_tokens();
    *max_query = std::max(*max_query, s.num_new_tokens());
    *max_context = std::max(*max_context, s.context_len());
  }
}

}  // namespace

int ModelRunner::GraphSizeFor(int num_seqs) const {
  for (const auto& [size, handle] : graphs_) {
    if (size >= num_seqs) return size;
  }
  return 0;
}

absl::StatusOr<RunnerOutput> ModelRunner::Execute(const StepPlan& plan, bool per_op_timing) {
  RunnerOutput out;
  const int n = static_cast<int>(plan.seqs.size());
  const int graph_size = use_graphs_ && IsUniformDecode(plan) ? GraphSizeFor(n) : 0;
  const double t0 = HostUs();
  backend_->BeginStep(per_op_timing && graph_size == 0);
  int rows = 0;
  if (graph_size > 0) {
    ASSIGN_OR_RETURN(rows, PrepareInputs(plan, graph_size));
    out.prepare_us = HostUs() - t0;
    int handle = -1;
    for (const auto& [size, h] : graphs_) {
      if (size == graph_size) handle = h;
    }
    RETURN_IF_ERROR(backend_->ReplayGraph(handle));
    out.graph_replayed = true;
    out.graph_batch_size = graph_size;
    out.padding_tokens = graph_size - n;
  } else {
    ASSIGN_OR_RETURN(rows, PrepareInputs(plan, 0));
    out.prepare_us = HostUs() - t0;
    int num_tokens, max_query, max_context;
    PlanBounds(plan, &num_tokens, &max_query, &max_context);
    RETURN_IF_ERROR(Forward(num_tokens, n, rows, max_query, max_context, false));
  }
  std::vector<int32_t>& tokens = buf_->h_tokens;
  tokens.resize(rows);
  if (rows > 0)
    RETURN_IF_ERROR(backend_->Download(buf_->tokens.View(DType::kI32, 1, rows), tokens.data()));
  ASSIGN_OR_RETURN(out.timing, backend_->EndStep());
  if (out.graph_replayed) {
    // Captured attention records carry the capture-time cost; restate this step's.
    for (OpRecord& op : out.timing.ops) {
      if (op.kind != OpKind::kAttention) continue;
      const int64_t hq = int64_t{model_.num_heads} * model_.head_dim;
      const DType dt = backend_->compute_dtype();
      AttentionBatch ab;
      ab.attended_pairs = buf_->attended_pairs;
      ab.context_tokens = buf_->context_tokens;
      AttentionShape sh{model_.num_heads, model_.num_kv_heads, model_.head_dim, config_.block_size,
                        1.f};
      op.cost = cost::Attention(Tensor{nullptr, dt, n, hq}, buf_->k_cache[0], ab, sh);
    }
  }
  const int keep = out.graph_replayed ? n : rows;  // padding rows are discarded
  out.sampled.assign(tokens.begin(), tokens.begin() + std::min(keep, rows));
  return out;
}

absl::StatusOr<RunnerOutput> ModelRunner::ExecuteWithLogits(const StepPlan& plan,
                                                            std::vector<float>* logits) {
  RunnerOutput out;
  backend_->BeginStep(true);
  ASSIGN_OR_RETURN(const int rows, PrepareInputs(plan, 0));
  int num_tokens, max_query, max_context;
  PlanBounds(plan, &num_tokens, &max_query, &max_context);
  RETURN_IF_ERROR(Forward(num_tokens, static_cast<int>(plan.seqs.size()), rows, max_query,
                          max_context, /*keep_logits=*/true));
  logits->resize(static_cast<size_t>(rows) * model_.vocab_size);
  if (rows > 0) {
    RETURN_IF_ERROR(backend_->Download(buf_->logits.View(DType::kF32, rows, model_.vocab_size),
                                       logits->data()));
  }
  ASSIGN_OR_RETURN(out.timing, backend_->EndStep());
  return out;
}

absl::Status ModelRunner::CaptureGraphs() {
  if (!backend_->SupportsGraphs()) {
    return absl::FailedPreconditionError(
        absl::StrCat("cuda_graphs: the ", backend_->name(), " backend cannot capture graphs"));
  }
  if (!graphs_.empty()) return absl::OkStatus();
  std::vector<int> sizes;
  for (int s : config_.graph_sizes) {
    if (s >= 1 && s <= buf_->max_seqs) sizes.push_back(s);
  }
  std::sort(sizes.begin(), sizes.end());
  sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
  const double t0 = HostUs();
  const size_t mem0 = backend_->graph_memory_bytes();
  StepPlan empty;
  for (auto it = sizes.rbegin(); it != sizes.rend(); ++it) {  // largest first
    const int s = *it;
    ASSIGN_OR_RETURN(const int rows, PrepareInputs(empty, s));
    RETURN_IF_ERROR(backend_->Synchronize());
    backend_->BeginStep(false);
    RETURN_IF_ERROR(backend_->BeginGraphCapture());
    absl::Status fwd = Forward(s, s, rows, 1, config_.max_model_len, false);
    absl::StatusOr<int> handle = backend_->EndGraphCapture();
    RETURN_IF_ERROR(fwd);
    if (!handle.ok()) return handle.status();
    graphs_.emplace_back(s, *handle);
    RETURN_IF_ERROR(backend_->EndStep().status());
  }
  std::sort(graphs_.begin(), graphs_.end());
  graph_info_.sizes = sizes;
  graph_info_.capture_ms = (HostUs() - t0) / 1000.0;
  graph_info_.memory_bytes = backend_->graph_memory_bytes() - mem0;
  return absl::OkStatus();
}

absl::Status ModelRunner::SetUseGraphs(bool on) {
  if (on) RETURN_IF_ERROR(CaptureGraphs());
  use_graphs_ = on;
  return absl::OkStatus();
}

}  // namespace saturn
