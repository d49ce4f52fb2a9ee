// Mirrors ModelRunner::Forward op by op with the formulas of kernels/op_cost.cc.
#include "engine/diag/step_cost.h"

#include <cmath>

namespace saturn {
namespace {

void Add(StepCost* c, OpClass k, double flops, double bytes) {
  ClassCost& cc = (*c)[static_cast<size_t>(k)];
  cc.flops += flops;
  cc.bytes += bytes;
  ++cc.ops;
}

// out[m, n] = x[m, k] w[n, k]^T; x in e-byte elements, w in we, out in out_e
void Gemm(StepCost* c, double m, double n, double k, double e, double we, double out_e) {
  Add(c, OpClass::kGemm, 2.0 * m * n * k, m * k * e + n * k * we + m * n * out_e);
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
  const double e = dtype_bytes;
  const double we = weight_dtype_bytes > 0 ? weight_dtype_bytes : e;
  const double ke = kv_dtype_bytes > 0 ? kv_dtype_bytes : e;
  StepCost c{};
  const double T = s.num_tokens, R = s.num_sampled, d = m.hidden_size,
               hq = double(m.num_heads) * m.head_dim, hkv = double(m.num_kv_heads) * m.head_dim,
               f = m.intermediate_size, V = m.vocab_size;
  if (T <= 0) return c;
  Add(&c, OpClass::kElementwise, 0, 4 * T + 2 * T * d * e);  // embedding
  for (int l = 0; l < m.num_layers; ++l) {
    if (l == 0) {
      Add(&c, OpClass::kNorm, 4 * T * d, 2 * T * d * e + d * e);
    } else {
      Add(&c, OpClass::kNorm, 5 * T * d, 4 * T * d * e + d * e);
    }
    Gemm(&c, T, hq + 2 * hkv, d, e, we, e);  // q, k and v: one GemmSplit
    Add(&c, OpClass::kElementwise, 10 * (T * hq + T * hkv) / 2, 2 * (T * hq + T * hkv) * e);
    Add(&c, OpClass::kElementwise, 0, 2 * T * hkv * (e + ke));  // kv write
    Add(&c, OpClass::kAttention, 4.0 * double(s.attended_pairs) * m.num_heads * m.head_dim,
        2 * T * hq * e + 2 * hkv * ke * double(s.context_tokens));
    Gemm(&c, T, d, hq, e, we, e);
    Add(&c, OpClass::kNorm, 5 * T * d, 4 * T * d * e + d * e);
    Gemm(&c, T, 2 * f, d, e, we, e);
    Add(&c, OpClass::kElementwise, 5 * T * f, 3 * T * f * e);  // swiglu
    Gemm(&c, T, d, f, e, we, e);
  }
  if (R <= 0) return c;
  Add(&c, OpClass::kElementwise, 0, 2 * R * d * e);  // gather hidden
  Add(&c, OpClass::kElementwise, 0, 2 * R * d * e);  // gather mlp out
  Add(&c, OpClass::kNorm, 5 * R * d, 4 * R * d * e + d * e);
  Gemm(&c, R, V, d, e, we, 4.0);  // logits are f32
  Add(&c, OpClass::kSampling, 5 * R * V, 4 * R * V);
  return c;
}

}  // namespace saturn
