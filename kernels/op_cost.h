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
OpCost KvWrite(const Tensor& k, const Tensor& v);
OpCost Attention(const Tensor& q, const Tensor& k_cache, const AttentionBatch& batch,
                 const AttentionShape& shape);
OpCost SwiGlu(const Tensor& gate_up, const Tensor& out);
OpCost Add(const Tensor& a);
OpCost GatherRows(const Tensor& out);
OpCost Sample(const Tensor& logits);
OpCost Copy(const Tensor& src);

}  // namespace saturn::cost
