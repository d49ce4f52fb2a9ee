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
#include "engine/diag/plan_build.h"
#include "engine/diag/plan_predict.h"
#include "engine/diag/step_curve.h"
#include "engine/measure/line_fit.h"
#include "kernels/base/enum_table.h"

namespace saturn {
namespace {

// Graph memory per captured size when the backend does not say (TensorRT-LLM PR #12895).
constexpr double kGraphBytesPerSize = 10.0 * (1 << 20);

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

// The mean rho of a Poisson count whose mean given that it is at least 1 is `mean`:
// rho / (1 - e^-rho) = mean (0 for mean <= 1).
double ZeroTruncatedPoissonRho(double mean) {
  if (!(mean > 1)) return 0;
  double lo = 0, hi = mean;
  for (int i = 0; i < 60; ++i) {
    const double mid = (lo + hi) / 2;
    (mid / -std::expm1(-mid) < mean ? lo : hi) = mid;
  }
  return (lo + hi) / 2;
}

// The mean given at least 1 of a Poisson count of mean rho.
double ZeroTruncatedPoissonMean(double rho) { return rho > 1e-9 ? rho / -std::expm1(-rho) : 1; }

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
// Turned on, a verify step is the measured decode curve at B (1 + q d) rows less what the cost
// model says B sequences save over that many: each sequence's context is read once for its
// 1 + d rows, its per-sequence work done once. (The curve alone counted every row as a
// sequence of its own: 25.6 ms predicted where 18.4 ms was measured, `small` at batch 8 with
// 4 tokens proposed; the cost model's ratio to the step of B sequences alone said 15.4.)
// In an open loop the batch falls with the time a request spends decoding (fewer sequences
// overlap): B after is the zero-truncated Poisson mean at the arrival load scaled by the
// change in step time per token, weighed by how open the window's load looks (PlanBuild).
void AddSpeculation(PlanBuild& b, Plan* plan) {
  const Profile& p = b.p;
  const int k_now = b.opts.num_speculative_tokens;
  const double q_seen = p.spec_proposal_rate, d = p.spec_mean_drafted, m = p.spec_mean_accepted;
  if (!(q_seen > 0 && d > 0) || b.ctx.async_scheduling) return;
  const bool on = k_now == 0;
  // Scored without speculating, q counts the token positions that could propose. Speculating,
  // a kept proposal skips the positions it covered, so a smaller share of the (fewer) steps
  // proposes: where proposing positions are spread evenly, tokens per step are
  // 1 / (q / (1 + m) + 1 - q); where they come in one run, 1 + q m. Measured between the two
  // (`small`, 4 proposed: 4.21 between 4.01 and 4.59 in an open loop, 4.76 between 4.66 and
  // 4.87 at 8 clients): the middle, half their distance an error.
  double q = q_seen, q_error = 0;
  if (on && !p.speculating && m > 0) {
    const double spread = 1 / (q_seen / (1 + m) + 1 - q_seen), run = 1 + q_seen * m;
    const double mid = (spread + run) / 2;
    q = (mid - 1) / m;
    q_error = (run - spread) / 2 / mid;
  }
  // The window's own mean batch where no earlier action moved it.
  const double batch = b.cur_batch == b.b_now ? b.b_mean : b.cur_batch;
  const CurveLookup plain = CurveLookupFn{b.pred, b.curve, b.cur_graphs}(batch, batch, false, 0);
  // Verify steps are not uniform decodes: eager, never replayed from a graph.
  const CurveLookupFn eager{b.pred, b.curve, false};
  auto verify = [&](double seqs) {
    CurveLookup l = eager(seqs * (1 + q * d), seqs * (1 + q * d), false, 0);
    if (!on) return l;  // the window's decode steps are verify steps already
    const double c = b.pred.context;
    const int64_t n = std::max<int64_t>(1, std::llround(seqs));
    const int64_t rows = std::max<int64_t>(n, std::llround(double(n) * (1 + q * d)));
    const StepShape shape{rows, rows, std::llround(double(n) * c),
                          std::llround(double(rows) * c + double(rows - n) / 2)};
    // A verify row reads its sequence's context once for all its proposed tokens, which the
    // cost model's bytes save whole; the measured decode steps save none. Like shared prefixes
    // (AddEnablePrefixCaching), the step lies between the two: the middle, half their distance
    // joins the error. The whole saving put verify steps under what ran (held-out plans: 10 of
    // 12 speculation predictions above the measured tokens/s, +19 % at 480-token prompts).
    const double saved = std::max(
        0.0, b.pred.ShapeUs(DecodeShape(rows, c), double(rows)) - b.pred.ShapeUs(shape, double(n)));
    const double before_saving = l.us;
    l.us = std::max(l.us - saved / 2, 0.5 * l.us);
    if (l.us > 0) l.rel_error += (before_saving - l.us) / l.us;
    // A verify step emits 1 + q m tokens a sequence where the window's decode steps emitted one,
    // and the host's work after a step (Scheduler::Update, token events) grows with its tokens:
    // by the plain steps' fitted time per token, or, where their tokens did not vary, up to
    // their host work per token (some of it is per step): then the middle, half an error. Not
    // adding it put verify steps of `tiny` (0.4 ms steps, a fifth of them host work) at 0.46 ms
    // where 0.61-0.62 ran (+31 % and +35 % tok/s in two held-out rounds).
    const double host = double(n) * q * m * b.post_us_per_token / (b.post_fitted ? 1 : 2);
    if (l.us > 0 && host > 0) {
      l.us += host;
      if (!b.post_fitted) l.rel_error += host / l.us;
    }
    // Between two measured batches far apart, a tiled GEMM's stair may sit anywhere: the step
    // can be off the line between them by up to the nearer one's distance (from 33 to 64 rows,
    // 38.5 read 19.6 and 23.5 ms in two runs where 18.4 was measured).
    const std::vector<CurvePoint>& pts = b.curve.decode;
    const double x = double(n) * (1 + q * d);
    for (size_t i = 1; i < pts.size() && l.us > 0; ++i) {
      if (pts[i - 1].x <= x && x <= pts[i].x && pts[i].x > pts[i - 1].x) {
        const double t = (x - pts[i - 1].x) / (pts[i].x - pts[i - 1].x);
        l.rel_error += std::min(t, 1 - t) * std::abs(pts[i].us - pts[i - 1].us) / l.us;
        break;
      }
    }
    return l;
  };
  auto tps_at = [&](double seqs) { return seqs * (1 + q * m) / verify(seqs).us * 1e6; };
  double spec_batch = batch, open_batch = batch;
  if (on && b.open_share > 0 && b.open_rho > 0 && plain.us > 0) {
    const double decode_share = std::clamp(1 - p.prefill_step_share, 0.0, 1.0);
    for (int i = 0; i < 8; ++i) {  // the batch and its step time settle together
      const double per_token = verify(spec_batch).us / (1 + q * m) / plain.us;
      open_batch =
          ZeroTruncatedPoissonMean(b.open_rho * (1 - decode_share + decode_share * per_token));
      spec_batch = (1 - b.open_share) * batch + b.open_share * open_batch;
    }
  }
  const CurveLookup spec = verify(spec_batch);
  const double rows = spec_batch * (1 + q * d);
  const double plain_tps = batch / plain.us * 1e6,
               spec_tps = spec_batch * (1 + q * m) / spec.us * 1e6;
  if (on ? !(spec_tps >= b.th.min_gain * plain_tps) : !(plain_tps >= b.th.min_gain * spec_tps)) {
    return;
  }
  Action a;
  a.kind = ActionKind::kSetSpeculativeTokens;
  a.from = k_now;
  a.to = on ? b.ctx.speculative_tokens_scored : 0;
  const std::string seen = absl::StrFormat(
      "%.0f%% of decodes propose %.1f tokens, %.0f%% of them kept%s", 100 * q_seen, d,
      100 * p.spec_acceptance_rate, p.speculating ? "" : " (scored on proposals not used)");
  a.what = on ? absl::StrFormat("speculate %d tokens by n-gram lookup", int(a.to))
              : absl::StrFormat("turn speculation off (num_speculative_tokens %d -> 0)", k_now);
  a.tradeoffs.push_back(Fm("acceptance", p.spec_acceptance_rate, seen));
  const CurveLookup& before = on ? plain : spec;
  const CurveLookup& after = on ? spec : plain;
  const double per_token_before = on ? 1 : 1 + q * m, per_token_after = on ? 1 + q * m : 1;
  a.batch_after = on ? spec_batch : batch;
  a.tokens_per_s_before = on ? plain_tps : spec_tps;
  a.tokens_per_s_after = on ? spec_tps : plain_tps;
  a.tpot_ms_before = before.us / per_token_before * 1e-3;
  a.tpot_ms_after = after.us / per_token_after * 1e-3;
  a.outside_measured = !after.in_range;
  // The tokens kept per proposal are a mean over the window's proposals, each keeping 0 to d:
  // twice its standard error (the variance at most m (d - m), and not under a quarter of d^2
  // over the count, so that a few proposals all kept still leave room), as a share of the
  // tokens per row. Where the load is neither clearly open nor closed, half the distance
  // between the two batches' predictions joins it.
  const double n = std::max(1.0, b.spec_proposals);
  const double accept_error =
      2 * q * std::sqrt((std::max(0.0, m * (d - m)) + d * d / (4 * n)) / n) / (1 + q * m);
  double load_error = 0;
  if (on && spec_batch != batch) {
    const double closed = tps_at(batch), open = tps_at(open_batch);
    load_error = std::abs(closed - open) / (closed + open) * (1 - std::abs(2 * b.open_share - 1));
  }
  a.expected_error =
      b.LookupError(after.rel_error, after.in_range) + accept_error + load_error + q_error;
  a.tradeoffs.push_back(Fm(
      "latency", a.tpot_ms_after,
      absl::StrFormat("time per output token %.2f -> %.2f ms", a.tpot_ms_before, a.tpot_ms_after)));
  a.tradeoffs.push_back(
      Fm("speculation_rows", rows,
         absl::StrFormat("decode steps of %.1f sequences run %.1f rows with proposals; a larger "
                         "batch leaves less idle compute to verify them in, so the gain falls as "
                         "the batch grows%s",
                         on ? spec_batch : batch, rows,
                         on && b.open_share > 0.2
                             ? absl::StrFormat(" (the load looks %.0f%% open-loop: requests "
                                               "that finish sooner overlap less, batch %.1f -> "
                                               "%.1f)",
                                               100 * b.open_share, batch, spec_batch)
                             : "")));
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

// An action whose expected error is too wide to act on states no number: why, and the
// measurement that would settle it (issue 50: a number with +-87 % beside it is not a plan).
void MarkUntrusted(const Plan& plan, const AnalyzerThresholds& th, double fit_error, Action* a) {
  if (!(a->expected_error > th.max_trusted_error)) return;
  const double pct = 100 * a->expected_error;
  // Its latency line is the same untrusted prediction (TPOT after).
  std::erase_if(a->tradeoffs, [](const FailureMode& f) { return f.name == "latency"; });
  if (a->outside_measured && plan.measured_max_batch > 0 &&
      a->batch_after > plan.measured_max_batch) {
    a->untrusted = absl::StrFormat(
        "expected error +-%.0f%%: decode batch %.0f lies past the measured steps (batch <= %.0f)",
        pct, a->batch_after, plan.measured_max_batch);
  } else if (a->outside_measured) {
    a->untrusted = absl::StrFormat(
        "expected error +-%.0f%%: the steps it needs lie past the measured step shapes (decode "
        "batch <= %.0f, prefill rows <= %.0f)",
        pct, plan.measured_max_batch, plan.measured_max_prefill_rows);
  } else {
    a->untrusted = absl::StrFormat(
        "expected error +-%.0f%%: what it rests on varies that much (the measured steps' "
        "mean, their drift %.0f%% over the window, the step model's fit error %.0f%%%s)",
        pct, 100 * plan.step_drift, 100 * fit_error,
        a->kind == ActionKind::kSetSpeculativeTokens ? ", the share of proposals kept" : "");
  }
  if (!a->restart_flags.empty()) {
    a->settle_by = absl::StrFormat(
        "restart with %s under the same load and read that window's report", a->restart_flags);
  } else if (a->kind == ActionKind::kRaiseClientConcurrency) {
    a->settle_by = absl::StrFormat(
        "run the load at %.0f in-flight requests and read that window's report: it measures "
        "decode steps at batch %.0f",
        a->to, a->batch_after);
  } else {
    a->settle_by = absl::StrFormat(
        "apply it (saturn-diag apply) and read its tracked outcome (saturn-diag get): the plan "
        "tracker measures the steps it gives (decode batch %.0f)",
        a->batch_after);
  }
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

// The host work after a plain decode step per token it emitted (PlanBuild::post_us_per_token):
// a line per step + per token where the steps' tokens span a factor of 2 or more (at least 8
// steps at each end's half), else the mean over the tokens.
void PostPerToken(const std::vector<double>& tokens, const std::vector<double>& us, PlanBuild* b) {
  if (tokens.empty()) return;
  const auto [lo, hi] = std::minmax_element(tokens.begin(), tokens.end());
  const double mid = (*lo + *hi) / 2;
  const auto below = std::count_if(tokens.begin(), tokens.end(), [&](double t) { return t < mid; });
  const auto above = static_cast<std::ptrdiff_t>(tokens.size()) - below;
  if (*hi >= 2 * *lo && below >= 8 && above >= 8) {
    double per_step = 0;
    FitNonNegativeLine(tokens, us, &per_step, &b->post_us_per_token);
    b->post_fitted = true;
    return;
  }
  double sum_tokens = 0, sum_us = 0;
  for (size_t i = 0; i < tokens.size(); ++i) sum_tokens += tokens[i], sum_us += us[i];
  b->post_us_per_token = sum_us / sum_tokens;
}

}  // namespace

const char* ActionKindName(ActionKind k) {
  static constexpr std::array kNames{
      "enable_cuda_graphs",       "raise_max_num_seqs",    "raise_max_num_batched_tokens",
      "raise_client_concurrency", "enable_prefix_caching", "set_speculative_tokens",
      "quantize_weights",         "set_tensor_parallel"};
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
  double dec_seqs = 0, dec_seqs2 = 0, dec_steps = 0, host = 0, demand = 0;
  double verify_seqs = 0, shadow_proposals = 0;
  std::vector<double> post_tokens, post_us;  // plain decode steps' tokens and host work after
  int prefill_steps = 0, budget_hits = 0;
  for (const StepRecord& r : steps) {
    if (r.num_prefill_tokens == 0 && r.spec_draft_tokens == 0 && r.num_decode_tokens > 0) {
      post_tokens.push_back(r.num_decode_tokens), post_us.push_back(r.postprocess_us);
    }
    host += r.schedule_us + r.prepare_us + r.postprocess_us - r.hidden_host_us;
    demand = std::max(demand, double(r.num_running + r.queue_depth));
    verify_seqs += r.spec_verify_seqs;
    shadow_proposals += r.shadow_proposals;
    if (r.num_prefill_tokens == 0 && r.num_decode_tokens > 0) {
      dec_seqs += r.num_seqs, dec_seqs2 += double(r.num_seqs) * r.num_seqs, ++dec_steps;
    }
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
  b.b_mean = dec_steps > 0 ? dec_seqs / dec_steps : std::max(1.0, p.mean_batch_seqs);
  if (dec_steps >= 8) {
    const double var = std::max(0.0, dec_seqs2 / dec_steps - b.b_mean * b.b_mean);
    b.open_rho = ZeroTruncatedPoissonRho(b.b_mean);
    const double open_var = b.b_mean * (1 + b.open_rho - b.b_mean);
    b.open_share = open_var > 1e-3 ? std::clamp(var / open_var, 0.0, 1.0) : 0.0;
  }
  b.spec_proposals = p.speculating ? verify_seqs : shadow_proposals;
  PostPerToken(post_tokens, post_us, &b);
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
  AddTensorParallel(b, &plan);
  // What moved within the window moves again before the window that checks a prediction.
  for (Action& a : plan.actions) a.expected_error = std::hypot(a.expected_error, plan.step_drift);
  for (Action& a : plan.actions) MarkUntrusted(plan, th, model.fit_error, &a);
  if (plan.actions.empty()) plan.note = NoActionNote(v, plan, th, ctx.event_thread, b.declined);
  return plan;
}

}  // namespace saturn
