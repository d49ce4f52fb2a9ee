// Mirrors ModelRunner::Forward op by op, each op costed by kernels/op_cost.cc's own formula on
// operands of the step's shapes (no data): the formulas have one home.
#include "engine/diag/step_cost.h"

#include <cmath>

#include "kernels/op_cost.h"

namespace saturn {
namespace {

void Add(StepCost* c, OpClass k, const OpCost& cost) {
  ClassCost& cc = (*c)[static_cast<size_t>(k)];
  cc.flops += cost.flops;
  cc.bytes += cost.bytes;
  ++cc.ops;
}

// The dtype of an element of `bytes` bytes: 2 or 4, or for GEMM weights the block formats'
// average (q8_0 34 / 32, q4_0 18 / 32), as the analyzer's context records them (a recording
// with any other size is refused when it is read, recording.cc).
DType OfSize(double bytes) {
  for (DType t : {DType::kBF16, DType::kQ8_0, DType::kQ4_0}) {
    if (bytes == DTypeBytesPerElement(t)) return t;
  }
  return DType::kF32;
}

// An operand's shape and dtype, for the cost formulas (which read nothing else).
Tensor Shape(DType dt, double rows, double cols) {
  return Tensor{nullptr, dt, static_cast<int64_t>(rows), static_cast<int64_t>(cols)};
}

}  // namespace

StepShape DecodeShape(int64_t batch, double context) {
  StepShape s;
  s.num_tokens = batch;
  s.num_sampled = batch;
  s.context_tokens = std::llround(batch * context);
  s.attended_pairs = s.context_tokens;
  return s;
}

StepShape MixedShape(int64_t seqs, int64_t chunk, int64_t prior, int64_t decodes,
                     double decode_context, bool chunks_sample) {
  StepShape s = DecodeShape(decodes, decode_context);
  s.num_tokens += seqs * chunk;
  s.num_sampled += chunks_sample ? seqs : 0;
  s.context_tokens += seqs * (prior + chunk);
  // query row i (1-based) of a chunk attends prior + i positions
  s.attended_pairs += seqs * (chunk * prior + chunk * (chunk + 1) / 2);
  return s;
}

double WeightBytesPerStep(const ModelConfig& m, double dtype_bytes) {
  const double e = dtype_bytes;
  const double d = m.hidden_size, hq = double(m.num_heads) * m.head_dim,
               hkv = double(m.num_kv_heads) * m.head_dim, f = m.intermediate_size;
  const double per_layer = (hq * d + 2 * hkv * d + d * hq + 2 * f * d + d * f) * e;
  return m.num_layers * per_layer + double(m.vocab_size) * d * e;
}

StepCost EstimateStepCost(const ModelConfig& m, double dtype_bytes, const StepShape& s,
                          double weight_dtype_bytes, double kv_dtype_bytes) {
  const DType e = OfSize(dtype_bytes);
  const DType we = weight_dtype_bytes > 0 ? OfSize(weight_dtype_bytes) : e;
  const DType ke = kv_dtype_bytes > 0 ? OfSize(kv_dtype_bytes) : e;
  StepCost c{};
  const double T = s.num_tokens, R = s.num_sampled, d = m.hidden_size,
               hq = double(m.num_heads) * m.head_dim, hkv = double(m.num_kv_heads) * m.head_dim,
               f = m.intermediate_size, V = m.vocab_size;
  if (T <= 0) return c;
  const Tensor x = Shape(e, T, d), norm_w = Shape(e, 1, d);
  auto gemm = [&](double rows, double n, double k, DType out) {
    Add(&c, OpClass::kGemm, cost::Gemm(Shape(e, rows, k), Shape(we, n, k), Shape(out, rows, n)));
  };
  Add(&c, OpClass::kElementwise, cost::Embedding(Shape(DType::kI32, 1, T), Shape(e, V, d), x));
  const Tensor q = Shape(e, T, hq), k = Shape(e, T, hkv), cache = Shape(ke, 1, hkv);
  for (int l = 0; l < m.num_layers; ++l) {
    // The first layer's norm reads the embedding; the others add the residual first.
    Add(&c, OpClass::kNorm, l == 0 ? cost::RmsNorm(x, norm_w) : cost::AddRmsNorm(x, norm_w));
    gemm(T, hq + 2 * hkv, d, e);  // q, k and v: one GemmSplit
    Add(&c, OpClass::kElementwise, cost::Rope(q, k));
    Add(&c, OpClass::kElementwise, cost::KvWrite(k, k, cache));
    Add(&c, OpClass::kAttention,
        cost::Attention(cost::AttentionCostShape{static_cast<int64_t>(T), static_cast<int64_t>(hq),
                                                 e, static_cast<int64_t>(hkv), ke, s.attended_pairs,
                                                 s.context_tokens, m.num_heads, m.head_dim}));
    gemm(T, d, hq, e);
    Add(&c, OpClass::kNorm, cost::AddRmsNorm(x, norm_w));
    gemm(T, 2 * f, d, e);
    Add(&c, OpClass::kElementwise, cost::SwiGlu(Shape(e, T, 2 * f), Shape(e, T, f)));
    gemm(T, d, f, e);
  }
  if (R <= 0) return c;
  const Tensor rows = Shape(e, R, d);
  Add(&c, OpClass::kElementwise, cost::GatherRows(rows));  // the sampled rows' hidden state
  Add(&c, OpClass::kElementwise, cost::GatherRows(rows));  // and their MLP output
  Add(&c, OpClass::kNorm, cost::AddRmsNorm(rows, norm_w));
  gemm(R, V, d, DType::kF32);  // logits are f32
  Add(&c, OpClass::kSampling, cost::Sample(Shape(DType::kF32, R, V)));
  return c;
}

}  // namespace saturn
