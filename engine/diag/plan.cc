// The saturation plan: ordered actions with predicted tokens/s and TPOT from the fitted step
// model (step_model.h) and the shape cost model (step_cost.h), bounded by the scheduler's
// state: KV capacity, configured limits, queue demand, an optional TPOT objective.
// docs/DIAGNOSTICS.md, "Plan", explains each rule.
#include <algorithm>
#include <array>
#include <cmath>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/diag/analyzer.h"
#include "engine/diag/plan_predict.h"
#include "engine/diag/step_curve.h"
#include "kernels/base/enum_table.h"
#include "kernels/tensor.h"

namespace saturn {
namespace {

// Graph memory per captured size when the backend does not say (TensorRT-LLM PR #12895).
constexpr double kGraphBytesPerSize = 10.0 * (1 << 20);

FailureMode Fm(std::string name, double at, std::string detail) {
  return FailureMode{std::move(name), at, std::move(detail)};
}

// What the action rules share while one plan is built: where the server is now (batch,
// demand, request mix, the measured curve, the batch worth reaching) and what the actions
// added so far changed (options, decode batch, graphs). Each Add* rule below reads it, may
// append one action to the plan, and updates it for the rules after it.
struct PlanBuild {
  const Profile& p;
  const Verdict& v;
  const StepModel& model;
  const AnalyzerContext& ctx;
  const AnalyzerThresholds& th;
  const Predictor& pred;
  const StepCurve& curve;
  // Where the server is now.
  double demand = 0;  // most requests running + waiting in the window
  int b_now = 1;      // mean decode batch
  int prefill_steps = 0, budget_hits = 0;
  WorkloadMix mix;
  bool use_mix = false;             // the window saw prefill and the mix is known
  int budget_now = 1;               // max_num_batched_tokens in force
  int target = 1;                   // the batch worth reaching (plateau, KV, limit, TPOT objective)
  std::vector<FailureMode> bounds;  // what bounds the batch, shared by the batching actions
  // What the actions so far changed.
  EngineOptions opts;
  bool demand_bound = false;  // the max_num_seqs action stopped at what the queue supports
  double cur_batch = 1;
  bool cur_graphs = false;
  // An action the model's plateau suggested but the measured steps (or the request mix) did
  // not bear out: the no-action note says so, so a plateau far above the rate now does not
  // stand unexplained beside "no action".
  std::string declined;

  void Decline(const Action& a) {
    const double measured = curve.decode.empty() ? 0 : curve.decode.back().x;
    declined = absl::StrFormat(
        "%s was weighed and declined: %s %.0f tok/s at batch %.1f against %.0f now, under the "
        "%.2fx an action must gain%s",
        a.what,
        use_mix ? "with this request mix the measured steps give" : "the measured steps give",
        a.tokens_per_s_after, a.batch_after, a.tokens_per_s_before, th.min_gain,
        a.batch_after > measured && measured > 0
            ? absl::StrFormat(" (decode measured up to batch %.0f; past it the step model, "
                              "scaled to the last measured point)",
                              measured)
            : "");
  }

  // Decode steps: the measured curve where it reaches, the model (scaled to it) beyond.
  void FillDecode(Action* a, double batch_after, bool graphs_after) const {
    const CurveLookup l0 = CurveLookupFn{pred, curve, cur_graphs}(cur_batch, cur_batch, false, 0);
    const CurveLookup l =
        CurveLookupFn{pred, curve, graphs_after}(batch_after, batch_after, false, 0);
    a->batch_after = batch_after;
    a->tpot_ms_before = l0.us * 1e-3;
    a->tokens_per_s_before = cur_batch / l0.us * 1e6;
    a->tpot_ms_after = l.us * 1e-3;
    a->tokens_per_s_after = batch_after / l.us * 1e6;
    a->expected_error = std::max(l.rel_error, model.fit_error);
    a->outside_measured = !l.in_range;
    const double dt = a->tpot_ms_after / std::max(a->tpot_ms_before, 1e-9) - 1;
    a->tradeoffs.push_back(Fm("latency", a->tpot_ms_after,
                              absl::StrFormat("TPOT/ITL %.2f -> %.2f ms (%+.0f%%)",
                                              a->tpot_ms_before, a->tpot_ms_after, 100 * dt)));
  }

  // An action's figures from the request-mix predictions before and after it.
  void SetFromMix(const MixPrediction& before, const MixPrediction& after, Action* a) const {
    a->tokens_per_s_before = before.output_tokens_per_s;
    a->tpot_ms_before = before.tpot_ms;
    a->tokens_per_s_after = after.output_tokens_per_s;
    a->tpot_ms_after = after.tpot_ms;
    a->batch_after = after.decode_batch;
    a->prefill_share = after.prefill_share;
    a->mix_after = after;
    a->outside_measured = !after.in_range;
    a->expected_error = std::max(after.rel_error, model.fit_error);
  }

  // Workload-aware prediction of an action: closed-loop output tokens/s at `conc_before` ->
  // `conc_after` in-flight requests, max_num_seqs `seqs_before` -> `seqs_after`.
  void FillMix(Action* a, double conc_before, int seqs_before, double conc_after, int seqs_after,
               bool graphs_after) const {
    if (!use_mix) return;
    const MixPrediction before = PredictMix(CurveLookupFn{pred, curve, cur_graphs}, mix,
                                            conc_before, seqs_before, budget_now);
    const MixPrediction after = PredictMix(CurveLookupFn{pred, curve, graphs_after}, mix,
                                           conc_after, seqs_after, budget_now);
    SetFromMix(before, after, a);
    a->tradeoffs.push_back(
        Fm("workload_mix", after.prefill_share,
           absl::StrFormat("requests of %.0f prompt + %.0f output tokens: %.0f%% of step time in "
                           "steps carrying prefill, decode batch %.1f of %.0f in flight; expected "
                           "error %.0f%%%s",
                           mix.prompt_tokens, mix.output_tokens, 100 * after.prefill_share,
                           after.decode_batch, std::min<double>(conc_after, seqs_after),
                           100 * a->expected_error,
                           after.in_range ? "" : " (outside the measured step shapes)")));
  }
};

// The request mix: the engine's accepted requests, else the window's prefill/decode ratio
// with the mean request length. Without prefill in the window (use = false), decode-only
// predictions.
struct KnownMix {
  WorkloadMix mix;  // prompt_tokens: those a request's prefill computes (cached ones are not)
  double prompt_tokens = 0;  // a request's prompt, cached tokens included
  bool use = false;
  // Mean context of a decode row in steady state: a request's decode steps see P + 1 ...
  // P + O - 1 tokens before the new one, P + O/2 on average, whatever the batch. The window's
  // own mean follows the few requests it happened to hold (measured: 157 for a 128 + 128 mix
  // at batch 2, 191 at batch 16); 0 when the mix is not known.
  double decode_context() const { return use ? prompt_tokens + mix.output_tokens / 2 : 0; }
};

// Of the tokens looked up at admission in the window's steps, the share found in cached
// blocks: taken (caching on) or, `missed`, recomputed (caching off).
double PrefixShare(const std::vector<StepRecord>& steps, bool missed) {
  double query = 0, hit = 0;
  for (const StepRecord& r : steps) {
    if (r.options.prefix_caching == missed) continue;
    query += r.prefix_query_tokens;
    hit += r.prefix_hit_tokens;
  }
  return query > 0 ? std::clamp(hit / query, 0.0, 1.0) : 0;
}

KnownMix MixOf(const std::vector<StepRecord>& steps, const AnalyzerContext& ctx) {
  double win_prefill = 0, win_decode = 0;
  for (const StepRecord& r : steps)
    win_prefill += r.num_prefill_tokens, win_decode += r.num_decode_tokens;
  // Prompt tokens a request's prefill computes: those not taken from cached blocks.
  const double computed = 1 - PrefixShare(steps, false);
  WorkloadMix mix{ctx.mean_prompt_tokens * computed, ctx.mean_output_tokens};
  if (mix.prompt_tokens > 0 && win_prefill > 0 && win_decode > 0) {
    // Output length from the window's own token ratio rho = P / (O - 1): finished requests
    // favour the short ones that finish first (a window after a start or a change).
    mix.output_tokens = 1 + mix.prompt_tokens * win_decode / win_prefill;
  } else if ((mix.prompt_tokens <= 0 || mix.output_tokens <= 0) && win_prefill > 0 &&
             win_decode > 0 && ctx.mean_request_tokens > 0) {
    const double rho = win_prefill / win_decode;  // = P / (O - 1)
    mix.output_tokens = (ctx.mean_request_tokens + rho) / (1 + rho);
    mix.prompt_tokens = ctx.mean_request_tokens - mix.output_tokens;  // computed ones
  }
  const double prompt = computed > 0 ? mix.prompt_tokens / computed : mix.prompt_tokens;
  return KnownMix{mix, prompt, win_prefill > 0 && mix.prompt_tokens > 0 && mix.output_tokens > 0};
}

// The throughput plateau over every batch the server could be configured to, B90, the
// target batch and the failure modes that bound it.
void SetTarget(bool graphs, Plan* plan, PlanBuild* b) {
  const AnalyzerContext& ctx = b->ctx;
  const Predictor& pred = b->pred;
  const int limit = std::max({ctx.max_num_seqs_limit, ctx.options.max_num_seqs, b->b_now});
  // Attention grows with the batch too, so take the best over the range, not its end.
  for (int n = 1; n <= limit; ++n) {
    plan->plateau_tokens_per_s = std::max(plan->plateau_tokens_per_s, pred.DecodeTps(n, graphs));
  }
  plan->plateau_batch = limit;
  for (int n = 1; n <= limit; ++n) {
    if (pred.DecodeTps(n, graphs) >= b->th.plateau_fraction * plan->plateau_tokens_per_s) {
      plan->plateau_batch = n;
      break;
    }
  }
  int target = std::min({plan->plateau_batch, plan->kv_capacity_batch, limit});
  target = std::max(target, 1);
  int slo_batch = 1 << 20;
  if (ctx.tpot_slo_ms > 0) {
    slo_batch = 0;
    for (int n = 1; n <= limit; ++n) {
      if (pred.DecodeUs(n, graphs) * 1e-3 <= ctx.tpot_slo_ms) slo_batch = n;
    }
    target = std::max(1, std::min(target, slo_batch));
  }
  b->target = target;
  const int block = std::max(1, ctx.kv_block_size);
  if (plan->kv_capacity_batch < plan->plateau_batch) {
    b->bounds.push_back(Fm("kv_preemption", plan->kv_capacity_batch,
                           absl::StrFormat("the KV cache (%d blocks of %d tokens) holds %d "
                                           "sequences of %.0f tokens; past batch %d requests are "
                                           "preempted and recomputed",
                                           ctx.kv_num_blocks, block, plan->kv_capacity_batch,
                                           plan->expected_seq_len, plan->kv_capacity_batch)));
  }
  if (limit < plan->plateau_batch || (limit == plan->plateau_batch && limit > b->b_now)) {
    b->bounds.push_back(Fm("configured_limit", limit,
                           absl::StrFormat("max_num_seqs_limit is %d", ctx.max_num_seqs_limit)));
  }
  if (slo_batch < std::min(plan->plateau_batch, plan->kv_capacity_batch)) {
    b->bounds.push_back(Fm("tpot_slo", slo_batch,
                           absl::StrFormat("TPOT objective %.1f ms holds up to batch %d",
                                           ctx.tpot_slo_ms, slo_batch)));
  }
}

void AddEnableCudaGraphs(PlanBuild& b, Plan* plan) {
  const AnalyzerContext& ctx = b.ctx;
  Action a;
  a.kind = ActionKind::kEnableCudaGraphs;
  a.what = "enable CUDA graphs (decode steps replay one graph instead of launching each op)";
  b.FillDecode(&a, b.cur_batch, true);
  const double mem = ctx.graph_memory_bytes > 0
                         ? ctx.graph_memory_bytes
                         : kGraphBytesPerSize * double(ctx.graph_sizes.size());
  a.tradeoffs.push_back(Fm("graph_memory", mem,
                           absl::StrFormat("%.0f MiB for %zu captured sizes%s; capture time "
                                           "grows with the number of sizes",
                                           mem / (1 << 20), ctx.graph_sizes.size(),
                                           ctx.graph_memory_bytes > 0 ? "" : " (estimated)")));
  const int padded = b.pred.Padded(int(b.cur_batch), true);
  a.tradeoffs.push_back(Fm("padding_waste", padded - b.cur_batch,
                           absl::StrFormat("batch %.0f pads to %d rows (%.0f%% waste)", b.cur_batch,
                                           padded, 100.0 * (padded - b.cur_batch) / padded)));
  b.opts.cuda_graphs = true;
  a.options_after = b.opts;
  b.cur_graphs = true;
  plan->actions.push_back(a);
}

// Caching off while admitted prompts were found in the cache and recomputed: turn it on. The
// request mix after it computes only the share of each prompt that was not cached; the rules
// after this one plan with that mix.
void AddEnablePrefixCaching(PlanBuild& b, Plan* plan, double missed) {
  if (b.ctx.options.prefix_caching || missed < b.th.prefix_missed_share) return;
  Action a;
  a.kind = ActionKind::kEnablePrefixCaching;
  a.what = "turn on prefix caching";
  const double concurrency = std::max(b.demand, b.cur_batch);
  if (!b.use_mix) {
    b.declined = absl::StrFormat(
        "%s was weighed, but the window holds no prefill with a known request mix to predict "
        "it from",
        a.what);
    return;
  }
  WorkloadMix after_mix = b.mix;
  after_mix.prompt_tokens = std::max(1.0, b.mix.prompt_tokens * (1 - missed));
  const CurveLookupFn measured{b.pred, b.curve, b.cur_graphs};
  // Sequences that decode side by side read the blocks of a prefix they share once per step,
  // not once each, so decode steps after the change read fewer KV bytes. How much faster that
  // makes them the window cannot say: the cost model's bytes bound it from above (measured on
  // a 1,024-token shared prefix at batch 8: decode steps 18.0 -> 15.5 ms, where the bytes said
  // about 11), the steps as measured from below. The prediction is the middle of the two, and
  // half their distance joins the expected error.
  const double shared = missed * b.mix.prompt_tokens, context = b.pred.context;
  auto decode_us = [&](double rows, double unique_context_tokens) {
    StepShape shape = DecodeShape(std::max<int64_t>(1, std::llround(rows)), context);
    if (unique_context_tokens >= 0) shape.context_tokens = std::llround(unique_context_tokens);
    return b.pred.ShapeUs(shape, rows);
  };
  auto sharing = [&](double rows, double decode_rows, bool prefill, double after_prefill) {
    CurveLookup l = measured(rows, decode_rows, prefill, after_prefill);
    const double unshared = decode_us(rows, -1);
    if (!prefill && unshared > 0) {
      l.us *= decode_us(rows, rows * std::max(0.0, context - shared) + shared) / unshared;
    }
    return l;
  };
  const MixPrediction before =
      PredictMix(measured, b.mix, concurrency, b.opts.max_num_seqs, b.budget_now);
  const MixPrediction unshared =
      PredictMix(measured, after_mix, concurrency, b.opts.max_num_seqs, b.budget_now);
  const MixPrediction all_shared =
      PredictMix(sharing, after_mix, concurrency, b.opts.max_num_seqs, b.budget_now);
  MixPrediction after = unshared;
  after.output_tokens_per_s = (unshared.output_tokens_per_s + all_shared.output_tokens_per_s) / 2;
  after.tpot_ms = (unshared.tpot_ms + all_shared.tpot_ms) / 2;
  const double spread =
      std::abs(all_shared.output_tokens_per_s - unshared.output_tokens_per_s) /
      std::max(all_shared.output_tokens_per_s + unshared.output_tokens_per_s, 1e-9);
  a.from = b.mix.prompt_tokens;
  a.to = after_mix.prompt_tokens;
  b.SetFromMix(before, after, &a);
  a.expected_error += spread;
  if (!(a.tokens_per_s_after >= b.th.min_gain * a.tokens_per_s_before)) {
    b.Decline(a);
    return;
  }
  a.tradeoffs.push_back(Fm(
      "workload_mix", after.prefill_share,
      absl::StrFormat("prefill computes %.0f of %.0f prompt tokens per request: %.0f%% -> %.0f%% "
                      "of step time in steps carrying prefill; expected error %.0f%%%s",
                      after_mix.prompt_tokens, b.mix.prompt_tokens, 100 * before.prefill_share,
                      100 * after.prefill_share, 100 * a.expected_error,
                      after.in_range ? "" : " (outside the measured step shapes)")));
  a.tradeoffs.push_back(Fm("kv_reuse", missed,
                           absl::StrFormat("%.0f%% of admitted prompt tokens were in the KV cache "
                                           "and computed again; cached blocks live in free KV "
                                           "blocks, evicted least recently used when a request "
                                           "needs them: a smaller cache or more distinct prompts "
                                           "hit less",
                                           100 * missed)));
  b.opts.prefix_caching = true;
  a.options_after = b.opts;
  b.mix = after_mix;
  plan->actions.push_back(a);
}

// When the queue or max_num_seqs binds: raise max_num_seqs to the target (the batch reaches
// what the demand supports).
void AddRaiseMaxNumSeqs(PlanBuild& b, Plan* plan) {
  const AnalyzerContext& ctx = b.ctx;
  const bool queue_binds = b.p.max_queue_depth > 0 || b.b_now >= 0.95 * ctx.options.max_num_seqs;
  if (!queue_binds || b.target <= ctx.options.max_num_seqs) return;
  const double reach = std::min<double>(b.target, std::max<double>(b.demand, b.b_now));
  if (!(b.pred.DecodeTps(int(reach), b.cur_graphs) >=
        b.th.min_gain * b.pred.DecodeTps(int(b.cur_batch), b.cur_graphs))) {
    // The limit binds only because clients send no more: ask them (AddRaiseClientConcurrency).
    if (reach < b.target) b.demand_bound = true;
    return;
  }
  Action a;
  a.kind = ActionKind::kRaiseMaxNumSeqs;
  a.from = ctx.options.max_num_seqs;
  a.to = b.target;
  a.what = absl::StrFormat("raise max_num_seqs %d -> %d", ctx.options.max_num_seqs, b.target);
  b.FillDecode(&a, reach, b.cur_graphs);
  b.FillMix(&a, b.demand, ctx.options.max_num_seqs, b.demand, b.target, b.cur_graphs);
  // Decode steps gain, but the request mix may not: with long prompts and few output tokens
  // every token costs a prompt, and more sequences per step change nothing the clients see.
  if (!(a.tokens_per_s_after >= b.th.min_gain * a.tokens_per_s_before)) {
    b.Decline(a);
    return;
  }
  a.tradeoffs.insert(a.tradeoffs.end(), b.bounds.begin(), b.bounds.end());
  if (reach < b.target) {
    b.demand_bound = true;
    a.tradeoffs.push_back(Fm("queue_demand", reach,
                             absl::StrFormat("only %.0f requests are in flight: the batch "
                                             "stops at %.0f until clients send more",
                                             b.demand, reach)));
  }
  b.opts.max_num_seqs = b.target;
  a.options_after = b.opts;
  b.cur_batch = reach;
  plan->actions.push_back(a);
}

// When prefill chunks fill the token budget while requests wait: raise the budget to where
// mixed steps reach the plateau of prefill tokens/s.
void AddRaiseMaxNumBatchedTokens(PlanBuild& b, Plan* plan) {
  if (!(b.prefill_steps > 0 && b.p.max_queue_depth > 0 &&
        b.budget_hits >= b.th.budget_hit_share * b.prefill_steps)) {
    return;
  }
  const Predictor& pred = b.pred;
  EngineOptions& opts = b.opts;
  const int tlimit = std::max(b.ctx.max_num_batched_tokens_limit, opts.max_num_batched_tokens);
  const int decodes = int(b.cur_batch);
  auto tps = [&](int t) { return t / pred.MixedUs(t, decodes) * 1e6; };
  double plateau = 0;  // prefill attention is quadratic in the chunk: best, not the end
  for (int t = 64; t <= tlimit; t += 64) plateau = std::max(plateau, tps(t));
  int t_target = tlimit;
  for (int t = 64; t <= tlimit; t += 64) {
    if (tps(t) >= b.th.plateau_fraction * plateau) {
      t_target = t;
      break;
    }
  }
  if (t_target <= opts.max_num_batched_tokens) return;
  Action a;
  a.kind = ActionKind::kRaiseMaxNumBatchedTokens;
  a.from = opts.max_num_batched_tokens;
  a.to = t_target;
  a.what = absl::StrFormat("raise max_num_batched_tokens %d -> %d", opts.max_num_batched_tokens,
                           t_target);
  a.batch_after = b.cur_batch;
  a.tokens_per_s_before = tps(opts.max_num_batched_tokens);
  a.tokens_per_s_after = tps(t_target);
  a.tpot_ms_before = pred.MixedUs(opts.max_num_batched_tokens, decodes) * 1e-3;
  a.tpot_ms_after = pred.MixedUs(t_target, decodes) * 1e-3;
  a.tradeoffs.push_back(Fm("latency", a.tpot_ms_after,
                           absl::StrFormat("decodes sharing a prefill step see ITL %.1f -> "
                                           "%.1f ms",
                                           a.tpot_ms_before, a.tpot_ms_after)));
  opts.max_num_batched_tokens = t_target;
  a.options_after = opts;
  plan->actions.push_back(a);
}

// Speculative decoding by n-gram lookup. Off: where the proposals the scheduler scored on the
// window's own tokens would be kept often enough that verifying them (more rows per decode
// step, each a decode row) gives more tokens per second than plain decode steps: turn it on.
// On: where plain decode steps at the batch now would give more (the batch has grown, or
// proposals are rarely kept): turn it off. Decode steps at the batch the earlier actions reach:
//   rows = B (1 + q d), tokens = B (1 + q m)   (q: decodes that propose; d, m: tokens proposed
//   and kept per proposal), tokens/s = tokens / step(rows).
void AddSpeculation(PlanBuild& b, Plan* plan) {
  const Profile& p = b.p;
  const int k_now = b.opts.num_speculative_tokens;
  const double q = p.spec_proposal_rate, d = p.spec_mean_drafted, m = p.spec_mean_accepted;
  if (!(q > 0 && d > 0) || b.ctx.async_scheduling) return;
  const double batch = b.cur_batch, rows = batch * (1 + q * d);
  const CurveLookup plain = CurveLookupFn{b.pred, b.curve, b.cur_graphs}(batch, batch, false, 0);
  // Verify steps are not uniform decodes: eager, never replayed from a graph.
  const CurveLookup spec = CurveLookupFn{b.pred, b.curve, false}(rows, rows, false, 0);
  const double plain_tps = batch / plain.us * 1e6, spec_tps = batch * (1 + q * m) / spec.us * 1e6;
  const bool on = k_now == 0;
  if (on ? !(spec_tps >= b.th.min_gain * plain_tps) : !(plain_tps >= b.th.min_gain * spec_tps)) {
    return;
  }
  Action a;
  a.kind = ActionKind::kSetSpeculativeTokens;
  a.from = k_now;
  a.to = on ? b.ctx.speculative_tokens_scored : 0;
  const std::string seen = absl::StrFormat(
      "%.0f%% of decodes propose %.1f tokens, %.0f%% of them kept%s", 100 * q, d,
      100 * p.spec_acceptance_rate, p.speculating ? "" : " (scored on proposals not used)");
  a.what = on ? absl::StrFormat("speculate %d tokens by n-gram lookup", int(a.to))
              : absl::StrFormat("turn speculation off (num_speculative_tokens %d -> 0)", k_now);
  a.tradeoffs.push_back(Fm("acceptance", p.spec_acceptance_rate, seen));
  const CurveLookup& before = on ? plain : spec;
  const CurveLookup& after = on ? spec : plain;
  const double per_token_before = on ? 1 : 1 + q * m, per_token_after = on ? 1 + q * m : 1;
  a.batch_after = batch;
  a.tokens_per_s_before = on ? plain_tps : spec_tps;
  a.tokens_per_s_after = on ? spec_tps : plain_tps;
  a.tpot_ms_before = before.us / per_token_before * 1e-3;
  a.tpot_ms_after = after.us / per_token_after * 1e-3;
  a.outside_measured = !after.in_range;
  a.expected_error = std::max(after.rel_error, b.model.fit_error);
  a.tradeoffs.push_back(Fm(
      "latency", a.tpot_ms_after,
      absl::StrFormat("time per output token %.2f -> %.2f ms", a.tpot_ms_before, a.tpot_ms_after)));
  a.tradeoffs.push_back(
      Fm("speculation_rows", rows,
         absl::StrFormat("decode steps of %.1f sequences run %.1f rows with proposals; a larger "
                         "batch leaves less idle compute to verify them in, so the gain falls as "
                         "the batch grows",
                         batch, rows)));
  b.opts.num_speculative_tokens = static_cast<int>(a.to);
  a.options_after = b.opts;
  plan->actions.push_back(a);
}

// When demand sets the batch (underloaded, or max_num_seqs raised as far as the queue goes):
// more in-flight requests from the clients.
//
// A window whose steps read compute-bound gets this action only when prefill steps make it so
// and the request mix predicts a gain: long prompts from few clients load the steps that carry
// them to the compute roof while the decode steps between them, at a small batch, stay
// memory-bound and would take more sequences almost for free.
void AddRaiseClientConcurrency(PlanBuild& b, Plan* plan) {
  auto crossed = [&](const char* name) {
    return std::any_of(b.v.signals.begin(), b.v.signals.end(),
                       [&](const Signal& s) { return s.name == name && s.crossed; });
  };
  // Compute-bound steps, no request waiting, the batch far under max_num_seqs, prefill seen.
  const bool compute_bound = b.v.step_bound == Bottleneck::kComputeBound;
  const bool prefill_demand =
      compute_bound && b.use_mix && crossed("max_waiting_requests") && crossed("batch_fill");
  if (!((b.v.bottleneck == Bottleneck::kUnderloaded || b.demand_bound || prefill_demand) &&
        b.target > b.cur_batch)) {
    return;
  }
  if (compute_bound && !b.use_mix) return;
  EngineOptions& opts = b.opts;
  const int target = b.target;
  Action a;
  a.kind = ActionKind::kRaiseClientConcurrency;
  a.from = b.demand;
  a.to = target;
  a.what = absl::StrFormat(
      "raise client concurrency %.0f -> %d in-flight requests%s", b.demand, target,
      opts.max_num_seqs < target
          ? absl::StrFormat(" (and max_num_seqs %d -> %d)", opts.max_num_seqs, target)
          : "");
  b.FillDecode(&a, target, b.cur_graphs);
  b.FillMix(&a, b.demand, opts.max_num_seqs, target, std::max(opts.max_num_seqs, target),
            b.cur_graphs);
  if (b.p.output_tokens_per_s > 0) {  // what the window delivered, idle included
    a.tokens_per_s_before = std::min(a.tokens_per_s_before, b.p.output_tokens_per_s);
  }
  // Host-bound: each request adds host work to every step, so more clients help only where
  // the measured steps say so (docs/CUDA.md: a host-bound window on a GPU).
  if (b.v.bottleneck == Bottleneck::kHostBound &&
      !(a.tokens_per_s_after >= b.th.min_gain * a.tokens_per_s_before)) {
    b.Decline(a);
    return;
  }
  if (compute_bound) {
    if (!(a.tokens_per_s_after >= b.th.min_gain * a.tokens_per_s_before)) return;
    a.tradeoffs.push_back(
        Fm("prefill_compute", a.prefill_share,
           absl::StrFormat("the steps read compute-bound from the prefill they carry; the decode "
                           "steps between them run %.1f sequences and take more for little time "
                           "(request mix: %.2fx tokens/s)",
                           b.cur_batch, a.tokens_per_s_after / a.tokens_per_s_before)));
  }
  a.tradeoffs.insert(a.tradeoffs.end(), b.bounds.begin(), b.bounds.end());
  if (opts.max_num_seqs < target) opts.max_num_seqs = target;
  a.options_after = opts;
  b.demand = target;  // the clients send that many: the rules after plan at it
  b.cur_batch = a.batch_after;
  plan->actions.push_back(a);
}

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
  return m.num_layers * layer + matrix(m.vocab_size, d, fmt == DType::kQ4_0 ? DType::kQ8_0 : fmt);
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

// Why a plan has no action: headroom in a kernel, the compute ceiling, or nothing to gain.
std::string NoActionReason(const Verdict& v, const Plan& plan, const AnalyzerThresholds& th,
                           bool event_thread) {
  if (v.bottleneck == Bottleneck::kHostBound) {
    return absl::StrCat(
        "no batching or client change is predicted to gain: the server's own host path (the "
        "verdict's phases) keeps the device idle inside each step, and more requests add to "
        "it; the change is in the server: ",
        HostPathChange(v, event_thread));
  }
  if (v.far_below_roofs && !v.headroom.empty()) {
    const Headroom& h = v.headroom.front();
    return absl::StrFormat(
        "no batching change predicted to gain throughput, but the steps run far below both "
        "roofs (%.0f%% of peak FLOP/s, %.0f%% of bandwidth): %s takes %.0f%% of the step at "
        "%.0f%% of its roof; a faster %s kernel would give up to %.2fx tokens/s",
        100 * v.step_mfu, 100 * v.step_mbu, OpClassName(h.op_class), 100 * h.step_share,
        100 * h.roofline_efficiency, OpClassName(h.op_class), h.speedup);
  }
  if (v.step_bound == Bottleneck::kComputeBound && !v.far_below_roofs) {
    return absl::StrFormat(
        "at the compute ceiling (steps at %.0f%% of peak FLOP/s): more batching adds "
        "latency, not throughput; batch %d already gives %.0f%% of the plateau",
        100 * v.step_mfu, plan.plateau_batch, 100 * th.plateau_fraction);
  }
  return "no change predicted to gain throughput";
}

std::string NoActionNote(const Verdict& v, const Plan& plan, const AnalyzerThresholds& th,
                         bool event_thread, const std::string& declined) {
  const std::string why = NoActionReason(v, plan, th, event_thread);
  return declined.empty() ? why : absl::StrCat(why, "; ", declined);
}

}  // namespace

const char* ActionKindName(ActionKind k) {
  static constexpr std::array kNames{
      "enable_cuda_graphs",       "raise_max_num_seqs",    "raise_max_num_batched_tokens",
      "raise_client_concurrency", "enable_prefix_caching", "set_speculative_tokens",
      "quantize_weights"};
  return EnumLookup(kNames, k, "?");
}

Plan MakePlan(const std::vector<StepRecord>& steps, const Profile& p, const Verdict& v,
              const StepModel& model, const AnalyzerContext& ctx, const AnalyzerThresholds& th) {
  Plan plan;
  if (steps.empty() || ctx.model.num_layers == 0) {
    plan.note = "no steps in the window: send requests to get a plan";
    return plan;
  }
  // Where the server is now.
  double dec_seqs = 0, dec_steps = 0, host = 0, demand = 0;
  int prefill_steps = 0, budget_hits = 0;
  for (const StepRecord& r : steps) {
    host += r.schedule_us + r.prepare_us + r.postprocess_us - r.hidden_host_us;
    demand = std::max(demand, double(r.num_running + r.queue_depth));
    if (r.num_prefill_tokens == 0 && r.num_decode_tokens > 0) dec_seqs += r.num_seqs, ++dec_steps;
    if (r.num_prefill_tokens > 0) {
      ++prefill_steps;
      if (r.num_prefill_tokens + r.num_decode_tokens >= r.options.max_num_batched_tokens) {
        ++budget_hits;
      }
    }
  }
  demand = std::max(demand, double(ctx.num_running + ctx.num_waiting));
  const int b_now =
      std::max(1, int(std::lround(dec_steps > 0 ? dec_seqs / dec_steps : p.mean_batch_seqs)));
  plan.batch_now = b_now;
  const KnownMix mix = MixOf(steps, ctx);
  const double window_context = p.mean_context > 0 ? p.mean_context : 1.0;
  plan.context = mix.decode_context() > 0 ? mix.decode_context() : window_context;
  plan.expected_seq_len =
      ctx.mean_request_tokens > 0 ? ctx.mean_request_tokens : 2.0 * plan.context;
  if (ctx.max_model_len > 0) {
    plan.expected_seq_len = std::min(plan.expected_seq_len, double(ctx.max_model_len));
  }
  const int block = std::max(1, ctx.kv_block_size);
  const int blocks_per_seq = std::max(1, int(std::ceil(plan.expected_seq_len / block)));
  plan.kv_capacity_batch = ctx.kv_num_blocks > 0 ? ctx.kv_num_blocks / blocks_per_seq : 1 << 20;
  const Predictor pred{model, ctx, plan.context, host / steps.size(), ctx.options.cuda_graphs};
  const StepCurve curve = MeasuredCurve(steps, pred, window_context, ctx, &plan);

  PlanBuild b{p, v, model, ctx, th, pred, curve};
  b.demand = demand;
  b.b_now = b_now;
  b.prefill_steps = prefill_steps;
  b.budget_hits = budget_hits;
  b.mix = mix.mix;
  b.use_mix = mix.use;
  b.budget_now = std::max(1, ctx.options.max_num_batched_tokens);
  const bool add_graphs = ctx.supports_graphs && !ctx.options.cuda_graphs &&
                          (v.step_bound == Bottleneck::kLaunchBound ||
                           std::any_of(v.signals.begin(), v.signals.end(), [](const Signal& s) {
                             return s.name == "launch_share" && s.crossed;
                           }));
  SetTarget(ctx.options.cuda_graphs || add_graphs, &plan, &b);
  b.opts = ctx.options;
  b.cur_batch = b_now;
  b.cur_graphs = ctx.options.cuda_graphs;

  // The rules, in the order their actions apply; each sees what the earlier ones changed. Work
  // not done comes first.
  AddEnablePrefixCaching(b, &plan, PrefixShare(steps, true));
  if (add_graphs) AddEnableCudaGraphs(b, &plan);
  AddRaiseMaxNumSeqs(b, &plan);
  AddRaiseMaxNumBatchedTokens(b, &plan);
  AddSpeculation(b, &plan);
  AddRaiseClientConcurrency(b, &plan);
  AddQuantizeWeights(b, &plan);
  if (plan.actions.empty()) plan.note = NoActionNote(v, plan, th, ctx.event_thread, b.declined);
  return plan;
}

}  // namespace saturn
