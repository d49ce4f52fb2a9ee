// Synthetic steps timed through the real model runner: decode steps at a few batch sizes and
// prefill chunks at a few lengths, so the diagnostics plan has measured step times across the
// whole range it may predict for (engine/diag/step_curve.h), not only the shapes served so far.
//
// Run on the engine thread while no step runs (Engine::ProbeSteps; the function that drives the
// runner is in step_probe_run.h, internal to the engine). Each synthetic sequence takes real KV
// blocks from the scheduler's block manager and returns them before the probe ends; a size
// whose blocks are not free is skipped (sizes are capped by what the KV cache holds). Sizes
// are probed in rounds (every size once, then again), so a time budget that runs out leaves
// the range covered before it adds repeats: a size is skipped when one more step of it would
// exceed its kind's share of the budget.
// Decode steps are timed twice per round, as serving runs them: back to back (a decode-only
// stretch) and each right after a prefill chunk (a mixed workload, where a new request's
// prefill lands every step or two). They differ: a decode step after other work runs slower
// (docs/CPU.md), and plans weigh the two by how often the mix puts prefill before a decode
// step (step_curve.h, PredictMix).
// Token ids are arbitrary and the sampled tokens are discarded; nothing a request can see changes.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/engine_options.h"

namespace saturn {

// The server's default time budget for a probe (--probe_steps_ms).
constexpr double kDefaultProbeBudgetMs = 2000;

struct StepProbeOptions {
  int max_batch = 64;            // decode batch sizes 1, 2, 4, ... up to this one (included)
  int max_prefill_tokens = 512;  // prefill chunks 16, 32, 64, ... up to this one (included)
  int min_prefill_tokens = 0;    // only chunks longer than this (a re-probe adding longer ones)
  int context = 0;               // decode context per sequence; 0: min(128, max_model_len / 2)
  int repeats = 3;               // timed steps per size
  // Total step time: 30 % decode back to back, 30 % decode after prefill, 40 % prefill (the
  // shares of kinds that have nothing to run go to the others); sizes that do not fit are left out.
  double budget_ms = kDefaultProbeBudgetMs;
  bool per_op_timing = true;  // as serving steps record them
  // Where the backend captures graphs: the decode batches also timed back to back with the
  // other graph setting (StepProbe::other_graphs), from the decode kind's share of the budget
  // again, so the plan reads the graphs action off measured steps. Graphs captured for it stay
  // captured (their memory is in EngineInfo), as a later switch would capture them anyway.
  bool both_graph_modes = true;

  absl::Status Validate() const;
};

// The timed steps of one shape.
struct ProbeSeries {
  bool prefill = false;  // one prefill chunk of `rows` tokens; else `rows` decode rows
  int rows = 0;
  int context = 0;              // context per sequence (decode: before the new token)
  std::vector<double> wall_us;  // one per timed step
  // Decode steps each timed right after a prefill chunk (else back to back after decode steps).
  bool after_prefill = false;
  // Of the timed steps (per-op timing on), the sampling ops' device time, summed: the probe
  // samples greedily, and a plan adds what its window's requests' sampling cost beyond that.
  double sampling_us = 0;
};

struct StepProbe {
  // Decode sizes ascending (back to back at decode_context, at long_context, then after
  // prefill), then prefill sizes ascending.
  std::vector<ProbeSeries> series;
  int decode_context = 0;
  // The longer context the decode batches were timed at too (series with this context; 0:
  // none): min(max_model_len - 1, 4 x decode_context), where that is >= 1.5 x it, on as many
  // sequences as the free KV blocks hold.
  int long_context = 0;
  bool graphs = false;  // decode steps replayed CUDA graphs
  // The decode batches back to back at decode_context with CUDA graphs the other way (!graphs);
  // empty where the backend captures no graphs or both_graph_modes was off. Not in `series`.
  std::vector<ProbeSeries> other_graphs;
  bool truncated = false;  // the budget or the KV cache left sizes out
  double took_ms = 0;
  double unix_s = 0;  // when probed (wall clock)
  int max_batch = 0;  // the largest decode batch / prefill chunk measured (0: none)
  int max_prefill_tokens = 0;
  int requested_prefill_tokens = 0;  // the longest chunk asked for (measured or left out)
};

// Whether `s` is one of `p`'s decode series timed at its long context (a slope's input, not a
// point of the curve: diag/step_curve.h, ContextSlopes).
inline bool AtLongContext(const StepProbe& p, const ProbeSeries& s) {
  return !s.prefill && !s.after_prefill && p.long_context > 0 && s.context == p.long_context;
}

// What an options change left unmeasured, as the probe to run (nullopt: nothing): prefill
// chunks longer than `before` allowed when max_num_batched_tokens widened past what `probe`
// covered or asked for (a chunk the budget left out once is not tried again: widening and
// narrowing back and forth pauses serving once, not each time), and every decode batch when
// CUDA graphs were switched (replays change decode step times). `base` carries the budget
// and batch limit.
std::optional<StepProbeOptions> ReprobeAfter(const EngineOptions& before,
                                             const EngineOptions& after, const StepProbe& probe,
                                             StepProbeOptions base);

// `fresh`, measured with `options`, laid over `old`: a kind `options` probed (decode when
// max_batch > 0, prefill when max_prefill_tokens > 0) replaces the old series of that kind,
// except prefill chunks no longer than min_prefill_tokens, which stay; a kind it did not
// probe stays as it was. took_ms and unix_s are fresh's (the latest measurement).
StepProbe MergeProbes(const StepProbe& old, StepProbe fresh, const StepProbeOptions& options);

// Geometric sizes from `first` up to `last`, doubling, `last` included (empty if last < first).
std::vector<int> ProbeSizes(int first, int last);

// The decode batches a probe times: ProbeSizes(1, max_batch), and one row past each of those
// from 16 on (16 -> 17, 32 -> 33, ...; below max_batch). Tiled GEMMs pay for whole tiles of
// rows, so a step's time rises in a stair, not a line (as measured with 16-row AMX tiles:
// docs/CPU.md). The size past each power of two puts the stair's edge on the curve.
std::vector<int> DecodeProbeSizes(int max_batch);

// Times again, in ascending rows, each back-to-back decode size (`series`, ascending) timed fewer
// than `repeats` times whose best grew faster than its rows over the previous size's best, until
// it does not or has `repeats` steps, while `budget_us` of step time lasts (the probe gives it
// 15 % of its budget). More rows never cost more than proportionally more time but for a tile's
// stair, which times the same again and stays; a step stalled by the machine (measured: batches
// 33-129 timed once at 2.1-2.4x the time the same sizes took in the next server's probe) would
// otherwise set its size's time and every prediction beyond it. `time(i)` runs one step of
// series i and appends its wall time to it (returned). Stops at the first size never timed.
absl::Status RecheckStalledSizes(const std::vector<ProbeSeries*>& series, int repeats,
                                 double budget_us,
                                 const std::function<absl::StatusOr<double>(size_t)>& time);

}  // namespace saturn
