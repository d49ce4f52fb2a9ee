// The measured step-time curve and the workload-aware throughput model built on it.
//
// StepCurve holds measured wall times of decode steps at several batch sizes and of prefill
// chunks at several lengths (from the window's own steps, CurveFromSteps). Plans interpolate it
// (piecewise linear) instead of extrapolating a fit; a query outside the measured range is
// flagged and carries a wider expected error (CurveLookup).
//
// PredictMix turns a step-time lookup into closed-loop output tokens/s for n in-flight requests
// with a given prompt/output mix, accounting for the prefill share of the rows, chunked prefill
// steps that slow the decodes sharing them, slots held by requests still in prefill and requests
// queued beyond max_num_seqs. docs/DIAGNOSTICS.md, "Workload-aware plans", derives it.
#pragma once

#include <functional>
#include <vector>

#include "engine/measure/step_probe.h"
#include "engine/measure/step_record.h"

namespace saturn {

struct CurvePoint {
  double x = 0;       // decode: batch rows; prefill: chunk tokens (+ decode rows sharing it)
  double us = 0;      // measured step wall time (window: mean; probe: best of its repeats)
  double spread = 0;  // relative spread of the samples: (p90 - p10) / median
  int samples = 0;
  // Prefill points: mean decode rows among x (a window's mixed steps; 0 for a probed chunk).
  // A decode row costs more than a prefill row (attention over its whole context, a logits
  // row), so plans move a point to another mix with the cost model (plan.cc).
  double decode_rows = 0;
  // Expected relative error of `us` as the shape's mean step time, the figure a prediction
  // rests on: twice the standard error of the window's mean (over the steps' effective count:
  // neighbouring steps share their load), or of the probe's typical/best ratio. Not the spread
  // of single steps, which a mean over many steps does not carry (docs/DIAGNOSTICS.md).
  double error = 0;
};

struct StepCurve {
  std::vector<CurvePoint> decode;   // ascending x
  std::vector<CurvePoint> prefill;  // ascending x
  // Decode steps that ran right after a step carrying prefill (a mixed workload's usual
  // decode step), ascending x; empty where none was measured (`decode` stands for them).
  std::vector<CurvePoint> decode_after_prefill;
};

struct CurveLookup {
  double us = 0;
  bool in_range = false;  // x within the measured points (else extrapolated)
  double rel_error = 0;   // expected relative error of `us`
};

// Interpolates `pts` (ascending x) at x. Empty: us = 0, in_range false, rel_error 1.
// Inside: linear between neighbours, error = the larger neighbour error + 2 %. Outside:
// extends the nearest segment's slope (never below 0), error grows with the distance:
// + 25 % per doubling beyond the range (docs/DIAGNOSTICS.md).
CurveLookup Interpolate(const std::vector<CurvePoint>& pts, double x);

// Groups the window's steps by shape: pure decode steps by num_seqs (those right after a step
// carrying prefill apart, in decode_after_prefill), steps carrying prefill by total rows (prefill +
// decode tokens, bucketed to powers of two / 4). Keeps the mean per group (throughput is tokens
// over summed step time: stalls count) with the spread (p90 - p10) / median and the mean's error,
// for groups of at least `min_samples` steps.
StepCurve CurveFromSteps(const std::vector<StepRecord>& steps, int min_samples = 2);

// The probe's timed series (engine/measure/step_probe.h) as curve points: the best time of each
// size (one stalled step must not set a size's time) times the median over the sizes timed more
// than once of their median repeat over their best (served steps are typical, not best, steps;
// never below 1), with the repeats' spread (p90 - p10) / median; its error is the spread of
// the typical/best ratios over the sizes (a size's own ratio is not the pooled one). Decode
// series at
// the probe's long_context are left out (they are ContextSlopes'). A decode size timed both
// back to back and after prefill gets, after prefill, its back-to-back time plus the median
// difference over all such sizes (never below 0): one pooled figure, not each noisy pair.
StepCurve CurveFromProbe(const StepProbe& probe, int min_samples = 1);

// How a decode step's time grows with its context, from the probe's batches timed at both
// decode_context and long_context (step_probe.h): x = batch, us = microseconds per context
// token per step ((best at long - best at short) / (long - short), never below 0). Empty
// where the probe has no long context. It carries attention's reads and the KV's share of the
// caches (a bigger KV footprint leaves less of the weights in a large last-level cache).
std::vector<CurvePoint> ContextSlopes(const StepProbe& probe);

// The slope at `batch`: interpolated inside the measured batches, per row beyond them; -1
// when `slopes` is empty.
double ContextSlopeAt(const std::vector<CurvePoint>& slopes, double batch);

// The window's curve extended by probed points. The window's own steps are what the server
// does now (load, host work, contention), so inside their range they are kept as they are;
// probed points are scaled to the window where both measured (decode, decode after prefill and
// prefill separately; a kind with no overlap takes another kind's, else none) and added outside
// the window's range. What the window adds to the probe's step may be a share of it (other load
// on the cores: a ratio, never below 1: a window faster than the probe's best ran warmer, which
// larger shapes do not keep) or a time per step (serving work the probe's steps do not do, never
// below 0). An overlap spanning probe times 1.5x apart or more is fitted with both (window =
// time + ratio x probe); a narrower one cannot tell them apart, so a scaled point takes the
// middle of the median ratio and the median difference, and half their distance joins its error.
// The overlap's residuals (or the ratios' spread) and the window points' errors join it too.
StepCurve MergeCurves(const StepCurve& window, const StepCurve& probe);

// Makes the step times non-decreasing in x (pool-adjacent-violators, weighted by samples):
// a step with more rows does at least the same work, so a point measured faster than a
// smaller shape is noise (a disturbed probe or window), not a property of the shapes. Pooled
// points keep their x, share the weighted mean time and the largest spread and error of the pool.
void MakeMonotone(std::vector<CurvePoint>* pts);

// How far the window's own step times moved while it ran: pure decode steps of the same rows in
// its first half against its second (groups of at least `min_samples` in each half), the
// relative change of their mean, weighted by the smaller count; 0 where no group qualifies. A
// prediction is checked in a later window, so what moved within one window (other load coming
// and going, the VM's memory bandwidth of the moment) joins every prediction's expected error.
double WindowDrift(const std::vector<StepRecord>& steps, int min_samples = 3);

struct WorkloadMix {
  double prompt_tokens = 0;  // mean prompt length
  double output_tokens = 0;  // mean output length (>= 1)
};

struct MixPrediction {
  double output_tokens_per_s = 0;
  double tpot_ms = 0;        // mean step time the decodes see (mixed steps included)
  double decode_batch = 0;   // decode rows per step
  double prefill_share = 0;  // share of step time in steps carrying prefill
  bool in_range = true;      // every lookup was inside the measured curve
  double rel_error = 0;      // expected relative error of output_tokens_per_s
  // Its parts, which a measured window can be held against part by part (saturn-bench-plan):
  double prefill_step_fraction = 0;  // share of steps carrying prefill (f)
  double decode_step_us = 0;         // a decode-only step (0: none)
  double mixed_step_us = 0;          // a step carrying prefill (0: none)
  double mixed_rows = 0;             // rows of a step carrying prefill (chunk + decodes)
  double output_tokens_per_step = 0;
};

// Step time lookup: rows processed, how many of them are decode rows (all of a decode step's),
// whether the step carries prefill, and (decode steps) the share of them that run right after
// a step carrying prefill (those run slower: step_probe.h).
using StepLookup =
    std::function<CurveLookup(double rows, double decode_rows, bool prefill, double after_prefill)>;

// Steady-state output tokens/s for `concurrency` closed-loop requests of mix `mix` on a server
// running at most `max_num_seqs` sequences and `budget` tokens per step. New requests arrive as
// a Poisson stream (k per step on average: a share 1 - e^-k of the steps carry prefill, of
// k / (1 - e^-k) prompts each, up to the budget), and a share f of the steps carrying prefill
// puts one before a share f of the decode steps.
// `cohort` in [0, 1]: how far the closed loop runs in cohorts instead (PredictCohorts; the
// rates, shares and batch are blended, and the two models' distance joins rel_error where the
// share is neither 0 nor 1).
MixPrediction PredictMix(const StepLookup& lookup, const WorkloadMix& mix, double concurrency,
                         int max_num_seqs, int budget, double cohort = 0);

// The same closed loop run in cohorts: clients that started together, sending requests of one
// length, stay in step (each finishes when the others do and sends its next at once), so every
// prompt of a cohort is prefilled in the same steps (pure prefill, up to the budget each) and
// the cohort then decodes output - 1 steps at its full batch. Cohorts of at most max_num_seqs
// run one after another.
MixPrediction PredictCohorts(const StepLookup& lookup, const WorkloadMix& mix, double concurrency,
                             int max_num_seqs, int budget);

}  // namespace saturn
