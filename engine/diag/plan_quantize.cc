// The plan's quantize_weights rule (docs/DIAGNOSTICS.md, "Plan", action 6): the GEMM weights in
// llama.cpp's q8_0 blocks where CPU decode is memory-bound at a low batch, predicted from the
// measured step less the GEMM time for the bytes no longer read, the GEMMs after timed on the
// calibrated q8_0 weight streams.
#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/diag/plan_build.h"
#include "kernels/quant_blocks.h"
#include "kernels/tensor.h"

namespace saturn {
namespace {

// Bytes of GEMM weights one step reads (every matrix once, the LM head included) with the
// matrices in block format `fmt`, placed as ModelRunner::UploadWeights places them: a matrix
// whose rows are not whole blocks stays in the compute dtype, and under q4_0 the LM head
// takes q8_0.
double QuantizedWeightBytesPerStep(const ModelConfig& m, DType fmt, double compute_bytes) {
  auto matrix = [&](int64_t rows, int64_t cols, DType t) {
    return cols % DTypeBlockElems(t) == 0 ? double(rows) * double(DTypeRowBytes(t, cols))
                                          : double(rows) * double(cols) * compute_bytes;
  };
  const int64_t d = m.hidden_size, hq = int64_t{m.num_heads} * m.head_dim,
                hkv = int64_t{m.num_kv_heads} * m.head_dim, f = m.intermediate_size;
  const double layer =
      matrix(hq + 2 * hkv, d, fmt) + matrix(d, hq, fmt) + matrix(2 * f, d, fmt) + matrix(d, f, fmt);
  return m.num_layers * layer + matrix(m.vocab_size, d, LmHeadDType(fmt));
}

// A decode step (or a step carrying prefill) with the GEMM weights in another format.
struct QuantizedStep {
  const PlanBuild& b;
  double saved_bytes;  // weight bytes a step no longer reads

  // The step model's GEMM time for the bytes no longer read, at its fitted GEMM rates (the
  // other op classes and the host part unchanged). Where the quantized kernel's peak was
  // calibrated (q8_0_gemm_flops_per_s), the GEMMs' compute term after is their FLOPs at that
  // peak, combined with the reads as the fitted model combines them (summed on the CPU at a
  // low batch): on the CPU the peak is below bf16's AMX one, so a batch that is memory-bound
  // now can be compute-bound with quantized weights.
  double SavedUs(const StepShape& shape, double* bytes_ratio) const {
    const AnalyzerContext& ctx = b.ctx;
    const StepCost cost = EstimateStepCost(ctx.model, ctx.dtype_bytes, shape,
                                           ctx.weight_dtype_bytes, ctx.kv_dtype_bytes);
    const size_t g = static_cast<size_t>(OpClass::kGemm);
    ClassCost after = cost[g];
    after.bytes = std::max(0.0, after.bytes - saved_bytes);
    double total = 0;
    for (const ClassCost& c : cost) total += c.bytes;
    *bytes_ratio = total > 0 ? std::max(0.0, total - saved_bytes) / total : 1;
    double after_us = b.model.ClassUs(g, after);
    const double r1 = b.p.q8_0_stream_bytes_per_s, r8 = b.p.q8_0_stream8_bytes_per_s;
    if (r1 > 0 && r8 > 0) {
      // The calibrated q8_0 streams: time per weight byte on the line through 1 and 8 rows
      // (reads, then each row's integer products), no faster than the 1-row stream.
      const double rows = static_cast<double>(std::max<int64_t>(1, shape.num_tokens));
      const double per_byte = std::max(1 / r1, 1 / r1 + (1 / r8 - 1 / r1) * (rows - 1) / 7);
      after_us = after.ops * b.model.op_overhead_us + after.bytes * per_byte * 1e6;
    } else if (b.p.q8_0_gemm_flops_per_s > 0) {  // the compute term at the kernel's peak
      StepModel q8 = b.model;
      q8.rates[g].flops_per_us = b.p.q8_0_gemm_flops_per_s * 1e-6;
      after_us = q8.ClassUs(g, after);
    }
    return b.model.ClassUs(g, cost[g]) - after_us;
  }
  // The measured step less SavedUs; where it saves time, never below the measured step
  // scaled by the step's bytes ratio (what it would take if all of it were reads); where the
  // quantized kernel's compute costs more than the reads saved, the step grows by that.
  double Us(double measured_us, const StepShape& shape) const {
    double ratio = 1;
    const double saved = SavedUs(shape, &ratio);
    if (saved < 0) return measured_us - saved;
    return std::max(measured_us - saved, measured_us * ratio);
  }
  CurveLookup operator()(double rows, double decode_rows, bool prefill,
                         double after_prefill) const {
    CurveLookup l =
        CurveLookupFn{b.pred, b.curve, b.cur_graphs}(rows, decode_rows, prefill, after_prefill);
    const int64_t r = std::max<int64_t>(1, std::llround(rows));
    const int64_t dr = std::clamp<int64_t>(std::llround(decode_rows), 0, prefill ? r - 1 : r);
    l.us = Us(l.us, prefill ? MixedShape(1, r - dr, 0, dr, b.pred.context, true)
                            : DecodeShape(r, b.pred.context));
    return l;
  }
};

}  // namespace

// Memory-bound decode at a low batch on the CPU backend with 2- or 4-byte GEMM weights: fewer
// bytes per weight. Proposes q8_0 (llama.cpp's block format, 34 bytes per 32 weights) and
// names q4_0's figure beside it. Predicted from the measured steps: the step at the batch the
// earlier actions reach, less the step model's GEMM time for the weight bytes no longer read
// (the fitted GEMM rates); with the request mix where the window carries prefill. Applied by a
// restart with --quantization (UpdateOptions cannot change the weights); its accuracy cost is
// not measured yet.
void AddQuantizeWeights(PlanBuild& b, Plan* plan) {
  const AnalyzerContext& ctx = b.ctx;
  const double w_now = ctx.weight_dtype_bytes > 0 ? ctx.weight_dtype_bytes : ctx.dtype_bytes;
  // The quantized kernels are the CPU backend's (the CUDA backend refuses q8_0 and q4_0).
  if (ctx.backend != "cpu" || w_now < 2 || b.v.step_bound != Bottleneck::kMemoryBound) return;
  const ModelConfig& m = ctx.model;
  const double batch = std::max(1.0, b.cur_batch);
  // Low batch: the decode GEMMs at the batch the earlier actions reach stream their weights
  // (their intensity under the calibrated ridge).
  const StepCost at =
      EstimateStepCost(m, ctx.dtype_bytes, DecodeShape(std::llround(batch), b.pred.context),
                       ctx.weight_dtype_bytes, ctx.kv_dtype_bytes);
  const ClassCost& gemm = at[static_cast<size_t>(OpClass::kGemm)];
  if (b.p.ridge > 0 && gemm.bytes > 0 && gemm.flops / gemm.bytes >= b.p.ridge) return;
  const double now_bytes = WeightBytesPerStep(m, w_now);
  const double concurrency = std::max(b.demand, b.cur_batch);
  auto predict = [&](DType fmt, Action* a) {
    const QuantizedStep q{b, now_bytes - QuantizedWeightBytesPerStep(m, fmt, ctx.dtype_bytes)};
    if (b.use_mix) {
      const CurveLookupFn measured{b.pred, b.curve, b.cur_graphs};
      b.SetFromMix(PredictMix(measured, b.mix, concurrency, b.opts.max_num_seqs, b.budget_now),
                   PredictMix(q, b.mix, concurrency, b.opts.max_num_seqs, b.budget_now), a);
    } else {
      const CurveLookup l = q(batch, batch, false, 0);
      const CurveLookup l0 = CurveLookupFn{b.pred, b.curve, b.cur_graphs}(batch, batch, false, 0);
      a->batch_after = batch;
      a->tpot_ms_before = l0.us * 1e-3;
      a->tokens_per_s_before = batch / l0.us * 1e6;
      a->tpot_ms_after = l.us * 1e-3;
      a->tokens_per_s_after = batch / l.us * 1e6;
      a->expected_error = std::max(l.rel_error, b.model.fit_error);
    }
    // No step with these weights was measured: the share of the step the model takes away is
    // a model figure, with the 25 % a lookup outside every measured point carries
    // (CurveLookupFn).
    const double removed = 1 - a->tpot_ms_after / std::max(a->tpot_ms_before, 1e-9);
    a->expected_error += 0.25 * std::max(0.0, removed);
    a->outside_measured = true;
    return q.saved_bytes;
  };
  Action a;
  a.kind = ActionKind::kQuantizeWeights;
  a.from = w_now;
  a.to = DTypeBytesPerElement(DType::kQ8_0);
  a.what = "quantize weights to q8_0 (restart: --quantization q8_0)";
  a.restart_flags = "--quantization q8_0";
  const double saved = predict(DType::kQ8_0, &a);
  Action q4;
  const double saved4 = predict(DType::kQ4_0, &q4);
  if (!(a.tokens_per_s_after >= b.th.min_gain * a.tokens_per_s_before)) {
    if (b.declined.empty()) b.Decline(a);  // a batching action's reason reads first
    return;
  }
  const double dt = a.tpot_ms_after / std::max(a.tpot_ms_before, 1e-9) - 1;
  a.tradeoffs.push_back(Fm("latency", a.tpot_ms_after,
                           absl::StrFormat("TPOT/ITL %.2f -> %.2f ms (%+.0f%%)", a.tpot_ms_before,
                                           a.tpot_ms_after, 100 * dt)));
  const ClassRates& rates = b.model.rates[static_cast<size_t>(OpClass::kGemm)];
  a.tradeoffs.push_back(
      Fm("weight_bytes", now_bytes - saved,
         absl::StrFormat("GEMM weights read per step %.1f -> %.1f MB (%.2f -> %.4f bytes per "
                         "weight); each step saves the step model's GEMM time for %.1f MB at %.1f "
                         "GB/s (%s), the rest of the step as measured. q4_0 (18 bytes per 32, the "
                         "LM head q8_0) would read %.1f MB: %.1f tok/s, TPOT %.2f ms",
                         now_bytes * 1e-6, (now_bytes - saved) * 1e-6, w_now, a.to, saved * 1e-6,
                         rates.bytes_per_us * 1e-3,
                         rates.bandwidth_fitted
                             ? "fitted to the window's GEMMs"
                             : "the calibrated ceiling: the window could not fit it",
                         (now_bytes - saved4) * 1e-6, q4.tokens_per_s_after, q4.tpot_ms_after)));
  // Embedding and norms stay in the compute dtype; a tied LM head that shared the embedding
  // table gets its own q8_0 copy.
  const bool shared_head = m.tie_word_embeddings && w_now == ctx.dtype_bytes;
  const double head_now = double(m.vocab_size) * m.hidden_size * ctx.dtype_bytes;
  const double held_after =
      ctx.weight_bytes > 0 ? ctx.weight_bytes - saved + (shared_head ? head_now : 0) : 0;
  a.tradeoffs.push_back(
      Fm("restart", held_after,
         absl::StrFormat("applied by restarting the server with --quantization q8_0 (UpdateEngine"
                         "Options cannot change the weights): the weights are requantized at load, "
                         "in-flight requests end, and the KV cache, prefix cache and probe start "
                         "empty%s",
                         ctx.weight_bytes > 0
                             ? absl::StrFormat("; weights held %.1f -> %.1f MB",
                                               ctx.weight_bytes * 1e-6, held_after * 1e-6)
                             : "")));
  a.tradeoffs.push_back(
      Fm("accuracy", 0,
         "not measured by the server: `saturn-bench-kl --model MODEL --quantization q8_0` "
         "measures the KL divergence of this model's next-token distributions under q8_0 "
         "against its own f32 weights over 4,096 positions, and how often the top token "
         "changes (llama-perplexity --kl-divergence's figures); on the small preset's random "
         "weights: mean KL 0.0022, the same top token 97 % of the time"));
  a.tradeoffs.push_back(
      Fm("kernel_rate", rates.bytes_per_us * 1e6,
         absl::StrCat(
             b.p.q8_0_stream_bytes_per_s > 0 && b.p.q8_0_stream8_bytes_per_s > 0
                 ? absl::StrFormat("the q8_0 GEMMs timed on the calibrated q8_0 weight streams "
                                   "(%.1f GB/s at 1 row, %.1f at 8; the line through them)",
                                   b.p.q8_0_stream_bytes_per_s * 1e-9,
                                   b.p.q8_0_stream8_bytes_per_s * 1e-9)
                 : "assumes the q8_0 GEMM streams its bytes at the rate this window's GEMMs did",
             b.p.q8_0_stream_bytes_per_s > 0 ? ""
             : b.p.q8_0_gemm_flops_per_s > 0
                 ? absl::StrFormat(" and computes at no more than its calibrated %.0f GFLOP/s "
                                   "(q4_0's figure assumes the same)",
                                   b.p.q8_0_gemm_flops_per_s * 1e-9)
                 : "; its compute ceiling was not calibrated (a recording from before it was), "
                   "so a batch that turns compute-bound is not foreseen",
             ". The plan tracker cannot check it: the restart starts a new process and "
             "session; compare the next report's decode tokens/s at the same batch with this "
             "prediction")));
  a.options_after = b.opts;
  plan->actions.push_back(a);
}

}  // namespace saturn
