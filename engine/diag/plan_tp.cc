// The plan's tensor-parallel rule (docs/DIAGNOSTICS.md, "Plan", action 7): ranks on one host
// share its memory bandwidth, so a step that is not compute-bound reads the same bytes in the
// same time with or without the split, and the collectives are what the split adds. Serving at
// tensor_parallel 1 on the same cores removes them: the step as measured less its collectives
// (rank 0's, transfer and waits). Pope et al. 2022's rule made numeric: the smallest partition
// that fits, then replicas. Across hosts the ranks add bandwidth and no action is offered.
#include <algorithm>

#include "absl/strings/str_format.h"
#include "engine/diag/plan_build.h"

namespace saturn {

void AddTensorParallel(PlanBuild& b, Plan* plan) {
  const TensorParallelProfile& t = b.v.tensor_parallel;
  if (t.ranks <= 1 || !t.single_host || t.comm_share <= 0 ||
      b.v.step_bound == Bottleneck::kComputeBound) {
    return;
  }
  const double batch = std::max(1.0, b.cur_batch);
  const CurveLookup now = CurveLookupFn{b.pred, b.curve, b.cur_graphs}(batch, batch, false, 0);
  Action a;
  a.kind = ActionKind::kSetTensorParallel;
  a.from = t.ranks;
  a.to = 1;
  a.what = absl::StrFormat(
      "serve at tensor_parallel 1 on the same cores (restart as one process, --tensor_parallel 1 "
      "and --threads the %d ranks' threads together)",
      t.ranks);
  a.restart_flags = "--tensor_parallel 1";
  a.batch_after = batch;
  a.tpot_ms_before = now.us * 1e-3;
  a.tokens_per_s_before = batch / now.us * 1e6;
  const double step_after = now.us * (1 - t.comm_share);
  a.tpot_ms_after = step_after * 1e-3;
  a.tokens_per_s_after = batch / step_after * 1e6;
  // The share taken away is a model figure (no step at TP=1 was measured), with the 25 % a
  // lookup outside every measured point carries (CurveLookupFn).
  a.expected_error = std::max(now.rel_error, b.model.fit_error) + 0.25 * t.comm_share;
  a.outside_measured = true;
  if (!(a.tokens_per_s_after >= b.th.min_gain * a.tokens_per_s_before)) {
    if (b.declined.empty()) b.Decline(a);
    return;
  }
  a.tradeoffs.push_back(
      Fm("latency", a.tpot_ms_after,
         absl::StrFormat("TPOT/ITL %.2f -> %.2f ms: the step less its %.0f%% in collectives (wait "
                         "%.0f%%, transfer %.0f%%); the ranks share one host's memory, so the "
                         "split's reads take as long on one process",
                         a.tpot_ms_before, a.tpot_ms_after, 100 * t.comm_share, 100 * t.wait_share,
                         100 * t.transfer_share)));
  a.tradeoffs.push_back(
      Fm("weights_fit", b.ctx.weight_bytes,
         absl::StrFormat("one process holds every weight and all the KV cache: rank 0 holds "
                         "%.1f MB of weights now, about 1/%d of the layers; where the whole model "
                         "does not fit one process's memory, the split is what makes it serve",
                         b.ctx.weight_bytes * 1e-6, t.ranks)));
  a.tradeoffs.push_back(
      Fm("restart", 0,
         "applied by restarting: one saturn-server without mpirun, given the cores the ranks "
         "had (--threads); in-flight requests end and the caches start empty. The plan tracker "
         "cannot check it (a new process); compare the next report's decode tokens/s at the "
         "same batch, or run bench/tp_layouts.sh"));
  a.options_after = b.opts;
  plan->actions.push_back(a);
}

}  // namespace saturn
