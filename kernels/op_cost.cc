#include "kernels/op_cost.h"

namespace saturn::cost {
namespace {
// The operand's own elements: a weight in a packed layout (Layout::kAmxTiles, kPanels) counts as
// its rows x cols, as the step cost model (engine/diag) computes from shapes alone; a
// block-quantized weight as its blocks' bytes (q8_0: 34 for 32 weights).
double B(const Tensor& t) { return static_cast<double>(t.rows) * DTypeRowBytes(t.dtype, t.cols); }
double N(const Tensor& t) { return static_cast<double>(t.numel()); }
}  // namespace

OpCost Embedding(const Tensor& ids, const Tensor& table, const Tensor& out) {
  (void)table;
  return {0.0, B(ids) + 2.0 * B(out)};  // gathered rows read once, written once
}

OpCost Gemm(const Tensor& x, const Tensor& w, const Tensor& out) {
  const double m = x.rows, k = x.cols, n = w.rows;
  return {2.0 * m * n * k, B(x) + B(w) + B(out)};
}

OpCost RmsNorm(const Tensor& x, const Tensor& weight) {
  return {4.0 * N(x), 2.0 * B(x) + B(weight)};
}

OpCost AddRmsNorm(const Tensor& x, const Tensor& weight) {
  // read x and residual, write residual and out
  return {5.0 * N(x), 4.0 * B(x) + B(weight)};
}

OpCost Rope(const Tensor& q, const Tensor& k) {
  // per rotated pair: 4 mul + 2 add; sin/cos counted as 2 ops each
  const double pairs = (N(q) + N(k)) / 2.0;
  return {10.0 * pairs, 2.0 * (B(q) + B(k))};
}

OpCost KvWrite(const Tensor& k, const Tensor& v, const Tensor& k_cache) {
  const double read = B(k) + B(v);  // the rows, then the same rows in the cache's dtype
  return {0.0, read * (1.0 + double(DTypeSize(k_cache.dtype)) / double(DTypeSize(k.dtype)))};
}

OpCost RopeKvWrite(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& k_cache) {
  return {Rope(q, k).flops, 2.0 * B(q) + KvWrite(k, v, k_cache).bytes};
}

OpCost Attention(const Tensor& q, const Tensor& k_cache, const AttentionBatch& batch,
                 const AttentionShape& shape) {
  return Attention(AttentionCostShape{q.rows, q.cols, q.dtype, k_cache.cols, k_cache.dtype,
                                      batch.attended_pairs, batch.context_tokens, shape.num_heads,
                                      shape.head_dim});
}

OpCost Attention(const AttentionCostShape& s) {
  // QK^T and PV: 2 FLOPs each per (query row, attended position, head, head_dim element).
  const double flops = 4.0 * static_cast<double>(s.attended_pairs) * s.num_heads * s.head_dim;
  // Each sequence's K and V are read once (all query heads of a KV group share the read).
  const double q_bytes = static_cast<double>(static_cast<size_t>(s.query_rows * s.query_cols) *
                                             DTypeSize(s.query_dtype));  // as Tensor::bytes()
  const double kv_row_bytes = static_cast<double>(s.kv_cols) * DTypeSize(s.kv_dtype);
  const double bytes = 2.0 * q_bytes + 2.0 * kv_row_bytes * static_cast<double>(s.context_tokens);
  return {flops, bytes};
}

OpCost SwiGlu(const Tensor& gate_up, const Tensor& out) {
  return {5.0 * N(out), B(gate_up) + B(out)};
}

OpCost GemmSwiGlu(const Tensor& x, const Tensor& w, const Tensor& act) {
  const Tensor gate_up{nullptr, act.dtype, x.rows, w.rows};
  return {Gemm(x, w, gate_up).flops + SwiGlu(gate_up, act).flops, B(x) + B(w) + B(act)};
}

OpCost Add(const Tensor& a) { return {N(a), 3.0 * B(a)}; }

OpCost GatherRows(const Tensor& out) { return {0.0, 2.0 * B(out)}; }

OpCost Sample(const Tensor& logits) {
  // softmax (max, exp, sum, scale) plus the top-k/top-p selection pass
  return {5.0 * N(logits), B(logits)};
}

OpCost Copy(const Tensor& src) { return {0.0, 2.0 * B(src)}; }

OpCost GatherColumns(const Tensor& whole, int ranks) {
  return {0.0, ranks > 1 ? double(ranks - 1) / ranks * B(whole) : 0.0};
}

OpCost AllReduce(const Tensor& x, int ranks) {
  return {0.0, ranks > 1 ? 2.0 * (ranks - 1) / ranks * B(x) : 0.0};
}

}  // namespace saturn::cost
