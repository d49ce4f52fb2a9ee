// The documented cost model: FLOPs and the fewest bytes each op must move, computed from
// shapes alone (docs/DIAGNOSTICS.md explains each formula). Pure functions; no timing.
#pragma once

#include "kernels/backend.h"

namespace saturn::cost {

OpCost Embedding(const Tensor& ids, const Tensor& table, const Tensor& out);
OpCost Gemm(const Tensor& x, const Tensor& w, const Tensor& out);
OpCost RmsNorm(const Tensor& x, const Tensor& weight);
OpCost AddRmsNorm(const Tensor& x, const Tensor& weight);
OpCost Rope(const Tensor& q, const Tensor& k);
OpCost KvWrite(const Tensor& k, const Tensor& v, const Tensor& k_cache);
// Rope's FLOPs; bytes: q read and written, k and v read once, their rows written to the cache.
OpCost RopeKvWrite(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& k_cache);
OpCost Attention(const Tensor& q, const Tensor& k_cache, const AttentionBatch& batch,
                 const AttentionShape& shape);
// What attention's cost depends on, as plain numbers. The overload above reads them from its
// operands; a caller that has the step's shapes but no operands states them here (the runner
// restating a replayed graph's attention records, which carry the capture-time batch).
struct AttentionCostShape {
  int64_t query_rows = 0;  // q's rows: the step's tokens
  int64_t query_cols = 0;  // num_heads * head_dim
  DType query_dtype = DType::kF32;
  int64_t kv_cols = 0;  // one K (or V) cache row: num_kv_heads * head_dim
  DType kv_dtype = DType::kF32;
  int64_t attended_pairs = 0;  // as AttentionBatch
  int64_t context_tokens = 0;
  int num_heads = 0;
  int head_dim = 0;
};
OpCost Attention(const AttentionCostShape& shape);
OpCost SwiGlu(const Tensor& gate_up, const Tensor& out);
// The GEMM into gate_up's shape and SwiGLU's FLOPs; bytes: x and w read, only act written.
OpCost GemmSwiGlu(const Tensor& x, const Tensor& w, const Tensor& act);
OpCost Add(const Tensor& a);
OpCost GatherRows(const Tensor& out);
OpCost Sample(const Tensor& logits);
OpCost Copy(const Tensor& src);
// A sum of x over `ranks` ranks: no FLOPs that count, and the bytes each rank sends and
// receives in a ring all-reduce, 2 (n - 1) / n of the message (NCCL's bus bandwidth convention,
// nccl-tests doc/PERFORMANCE.md).
OpCost AllReduce(const Tensor& x, int ranks);
// Rank 0 receiving the other ranks' column slices of `whole`: (n - 1) / n of it crosses.
OpCost GatherColumns(const Tensor& whole, int ranks);

}  // namespace saturn::cost
