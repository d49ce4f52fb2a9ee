// The cost model of a whole step, from the model shape alone: what kernels/op_cost.cc would
// attribute to each op ModelRunner::Forward issues, summed per op class. The analyzer uses it
// to predict FLOPs and bytes of steps the server has not run yet (another batch size, bigger
// prefill chunks). Pure functions; each op is costed by op_cost.cc's own formula, and the op
// sequence must stay in step with Forward (a test compares it with real step records).
#pragma once

#include <array>
#include <cstdint>

#include "engine/model/model_config.h"
#include "kernels/op_record.h"

namespace saturn {

constexpr size_t kNumOpClasses = static_cast<size_t>(OpClass::kCount);
// Whether a class's FLOPs and bytes are the roofline's (device compute and memory traffic): all
// but the comm class, whose bytes cross between tensor-parallel ranks. MFU, MBU, intensity,
// headroom and the calibration check leave comm out; its time stays in the step.
constexpr bool OnTheRoofline(size_t op_class) {
  return op_class != static_cast<size_t>(OpClass::kComm);
}

struct ClassCost {
  double flops = 0;
  double bytes = 0;
  int ops = 0;
};
using StepCost = std::array<ClassCost, kNumOpClasses>;

// The work of one hypothetical step.
struct StepShape {
  int64_t num_tokens = 0;      // query rows (prefill + decode + padding)
  int64_t num_sampled = 0;     // rows that go through the LM head and the sampler
  int64_t context_tokens = 0;  // sum over sequences of context length (KV rows read)
  int64_t attended_pairs = 0;  // sum over query rows of positions attended
};

// A uniform decode step: `batch` sequences of mean context `context` each.
StepShape DecodeShape(int64_t batch, double context);
// `seqs` prefill chunks of `chunk` tokens each, appended after `prior` cached tokens, plus
// `decodes` decode rows at mean context `decode_context`.
StepShape MixedShape(int64_t seqs, int64_t chunk, int64_t prior, int64_t decodes,
                     double decode_context, bool chunks_sample);

// Per-class FLOPs, bytes and op counts; `dtype_bytes` is the compute dtype's size (weights,
// activations, KV cache); logits are f32. `weight_dtype_bytes`, when > 0, is the GEMM
// weights' size where it differs (the CPU backend's bf16 weights with f32 activations), and
// `kv_dtype_bytes`, when > 0, the KV cache's (its bf16 cache beside them).
StepCost EstimateStepCost(const ModelConfig& m, double dtype_bytes, const StepShape& s,
                          double weight_dtype_bytes = 0, double kv_dtype_bytes = 0);

// Bytes of weights one step reads (every GEMM's weight matrix once).
double WeightBytesPerStep(const ModelConfig& m, double dtype_bytes);

}  // namespace saturn
