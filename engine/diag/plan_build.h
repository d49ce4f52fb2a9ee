// What the plan's action rules share (plan.cc, plan_quantize.cc): the state one plan is built
// in (PlanBuild) and the trade-off line helper. Internal to engine/diag/.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "engine/diag/analyzer.h"
#include "engine/diag/plan_predict.h"
#include "engine/diag/step_curve.h"

namespace saturn {

inline FailureMode Fm(std::string name, double at, std::string detail) {
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
  double b_mean = 1;  // the same, unrounded
  // How the load arrives, from the batches of the window's pure decode steps: a closed loop
  // holds its batch; an open loop's (arrivals that do not wait for completions) is Poisson
  // given that one sequence runs. `open_share` in [0, 1]: the window's batch variance over the
  // variance the open loop of the same mean would give; `open_rho`: that loop's mean number
  // of decoding sequences, idle time included.
  double open_share = 0, open_rho = 0;
  double spec_proposals = 0;  // proposals behind the window's speculation figures
  // Host work after a plain decode step (Scheduler::Update, token events) per token it emitted:
  // fitted per step + per token where the steps' tokens varied (`post_fitted`), else the mean
  // over the tokens, an upper bound (part of it is per step).
  double post_us_per_token = 0;
  bool post_fitted = false;
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

  // A lookup's error as an action's: the measured curve's own inside its range; beyond it the
  // step model carries the prediction, so its fit error bounds it from below.
  double LookupError(double rel_error, bool in_range) const {
    return in_range ? rel_error : std::max(rel_error, model.fit_error);
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
    a->expected_error = LookupError(l.rel_error, l.in_range);
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
    a->expected_error = LookupError(after.rel_error, after.in_range);
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

// Fewer bytes per weight where CPU decode is memory-bound (plan_quantize.cc); last in the plan.
void AddQuantizeWeights(PlanBuild& b, Plan* plan);
void AddTensorParallel(PlanBuild& b, Plan* plan);  // plan_tp.cc

}  // namespace saturn
