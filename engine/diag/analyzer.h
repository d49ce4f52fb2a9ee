// The analyzer: a live verdict on what limits serving over a window of step records, and the
// batching change that would saturate the device, predicted from a step-time model fitted to
// this server's own steps (engine/diag/step_model.h). Pure functions over plain data: no
// clocks, no engine access, no device. docs/DIAGNOSTICS.md documents every figure, signal,
// threshold (with its source) and plan action.
//
//   steps (oldest first) + window span + Calibration + AnalyzerContext
//     -> Profile (rates, shares, per-class roofline)      profile.cc
//     -> Verdict (class + the signals that decided it)    classify.cc
//     -> StepModel fit                                     step_model.cc
//     -> Plan (ordered actions, predictions, failure modes) plan.cc
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "engine/diag/step_curve.h"
#include "engine/diag/step_model.h"
#include "engine/measure/calibration.h"
#include "engine/measure/step_record.h"
#include "engine/measure/tp_stats.h"
#include "engine/model/model_config.h"

namespace saturn {

enum class Bottleneck {
  kUnknown,
  kUnderloaded,
  kLaunchBound,
  kMemoryBound,
  kComputeBound,
  kHostBound,  // the server's own host path (schedule, prepare, postprocess, loop gaps)
  // Tensor parallelism's collectives (transfer, or waits for a slower rank) take more of the
  // step than its work needs at the roofline
  kCommunicationBound,
  kCount
};
const char* BottleneckName(Bottleneck b);  // "LAUNCH_BOUND", ...

// What the analyzer needs to know about the server besides its step records.
struct AnalyzerContext {
  ModelConfig model;
  double dtype_bytes = 4;         // compute dtype (weights, activations, KV)
  double weight_dtype_bytes = 0;  // GEMM weights where they differ (0: dtype_bytes)
  double kv_dtype_bytes = 0;      // the KV cache where it differs (0: dtype_bytes)
  double weight_bytes = 0;
  // KV cache.
  int kv_num_blocks = 0;
  int kv_block_size = 16;
  double kv_bytes_per_block = 0;
  int max_model_len = 0;
  // Options in force and the limits UpdateOptions may raise them to.
  EngineOptions options;
  int max_num_seqs_limit = 0;
  int max_num_batched_tokens_limit = 0;
  // Backend.
  std::string backend;
  bool supports_graphs = false;
  bool event_thread = false;      // token events leave the engine thread (EngineInfo::event_thread)
  bool async_scheduling = false;  // the overlapped step loop (speculation needs the plain one)
  // Tokens per proposal the scheduler scores while speculation is off: the K a speculation
  // action proposes.
  int speculative_tokens_scored = kScoredSpeculativeTokens;
  std::vector<int> graph_sizes;   // captured decode batch sizes (ascending)
  double graph_memory_bytes = 0;  // 0: unknown (estimated per size, see plan.cc)
  // Engine counters now.
  int num_waiting = 0;
  int num_running = 0;
  double mean_request_tokens = 0;  // prompt + output of finished requests; 0: unknown
  double mean_prompt_tokens = 0;   // of accepted requests (at submission); 0: unknown
  double mean_output_tokens = 0;   // of finished requests; 0: unknown. Plans take the output
                                   // length from the window's prefill/decode token ratio and
                                   // the prompt length where the window has both (plan.cc)
  // Roofline form of the step model where the window cannot choose: 1 sum, 0 max, -1 the
  // backend's default (step_model.h).
  int additive_roofline = -1;
  // Synthetic steps timed at calibration (Engine::ProbeSteps): the measured step-time curve
  // beyond the window's own shapes. Empty: none probed. Decode points were timed at
  // probe_context tokens per sequence, with CUDA graphs on or off as probe_graphs says.
  // Tensor parallelism: every rank's collectives over the window (Engine::TensorParallelStats);
  // ranks 0 without.
  TpStats tp;
  StepCurve probe_curve;
  double probe_context = 0;
  // Microseconds per context token per decode step by batch (ContextSlopes; empty: none):
  // moves decode points between contexts by measurement instead of the fitted model.
  std::vector<CurvePoint> probe_context_slopes;
  bool probe_graphs = false;
  // Sampling ops' time per sampled row in the probe's decode steps by batch (x: batch, us: per
  // row; greedy rows, spread over the backend's threads as served rows are; empty: not timed).
  std::vector<CurvePoint> probe_sampling;
  // The probe's decode batches with CUDA graphs the other way (!probe_graphs), back to back at
  // probe_context (StepProbe::other_graphs; empty: not measured). Plans read the graphs
  // action off it: the other setting's step at a batch = the curve's step there times the
  // probe's other/own ratio at that batch.
  StepCurve probe_curve_other_graphs;
  // Optional latency objective: plans keep predicted TPOT under it (0: none).
  double tpot_slo_ms = 0;
  // The window's edges: busy time of steps that overlap the window but are not wholly inside
  // it (one that started before it, one still running at its end). Busy, never idle.
  double edge_busy_us = 0;
  bool step_in_flight = false;  // a step was still running at the window's end
  double widened_from_s = 0;    // > 0: the window asked for was this long and held too few steps
  // > 0: the window asked for was this long, but the step ring no longer held its start (the
  // report covers the ring's steps only); `ring_steps` is the ring's capacity.
  double truncated_from_s = 0;
  size_t ring_steps = 0;
  // The window's steps older than the ring's records, as the ring's per-second sums
  // (StepRing::WindowWithEvicted; steps 0: none). The profile and verdict count them with the
  // records; the step model and the plan read the records alone.
  StepSums earlier;
  bool earlier_cut =
      false;  // the sums no longer reach the window's start (they keep the newest seconds)
  // Share of runnable time the server's threads ran since the previous report (schedstat;
  // 1: no contention seen): under 1, other processes held the cores.
  double run_share = 1;
};

// Fixed thresholds, each with its source in docs/DIAGNOSTICS.md; the launch-bound test is
// derived from the calibrated dispatch cost instead (classify.cc).
struct AnalyzerThresholds {
  double idle_share = 0.30;        // engine idle / window (TRT-LLM idle ratio > 0.30)
  double launch_share = 0.10;      // dispatch / step time (TRT-LLM launch time / W > 0.10)
  double comm_share = 0.10;        // collectives / step time (tensor parallelism)
  double host_share = 0.05;        // host prep / step time (TRT-LLM exposed host prep > 0.05)
  double device_gap_share = 0.30;  // device idle inside steps (TRT-LLM; 0.15 with graphs)
  double device_gap_share_graphs = 0.15;
  double underfilled_batch = 0.5;  // mean batch / max_num_seqs under this with an empty queue
  double plateau_fraction = 0.90;  // B' reaches this share of the throughput plateau
  double min_gain = 1.05;          // an action must predict at least this throughput ratio
  // An action whose expected error is above this states no prediction (Action::untrusted):
  // +-50 % spans a factor of three, which neither ranks an action nor sizes a change.
  double max_trusted_error = 0.5;
  double budget_hit_share = 0.5;  // prefill steps that filled the token budget
  // Prefix caching off: a share of the prompt tokens looked up at admission at least this
  // large was in the cache and recomputed (the plan weighs turning caching on).
  double prefix_missed_share = 0.10;
  // A gap between steps is idle (waiting for requests) only when the next step admits a
  // request (has prefill tokens) and the gap is longer than max(this, the previous step's
  // time); otherwise it is the engine loop's own overhead (HTA's "kernel wait").
  double idle_gap_floor_us = kIdleGapFloorUs;  // the step ring's per-second sums use it too
  // Self-check: an achieved rate over the ceiling by more than this share (or the
  // calibration's own spread, if larger) marks the calibration suspect.
  double ceiling_tolerance = 0.05;
  // Headroom: a window is far below both roofs when MFU and MBU (over step time) are under this.
  double far_below_roofs = 0.5;
  // A verdict from fewer complete steps than this is qualified (the window is too short).
  int min_window_steps = 3;
  // Contended: the steps' threads had a core for under this share of their runnable time
  // (the verdict says so; the calibrated launch share is judged on the time they ran).
  double contended_run_share = 0.9;
};

// The self-check of the ceilings against what the window achieved (self_check.cc).
struct CalibrationCheck {
  bool suspect = false;            // an achieved rate exceeded a ceiling
  bool cache_resident = false;     // explained: the model's working set fits in the cache
  std::vector<std::string> notes;  // plain words, one per exceeded ceiling
  // What the verdict was judged with: max(calibrated, observed maximum).
  double judged_flops_per_s = 0, judged_bytes_per_s = 0;
  double observed_max_flops_per_s = 0, observed_max_bytes_per_s = 0;
  double raw_mfu = 0, raw_mbu = 0;  // the window's MFU/MBU against the calibrated ceilings
};

struct Signal {
  std::string name;
  double value = 0;
  double threshold = 0;
  bool crossed = false;
  std::string source;   // where the threshold comes from
  std::string meaning;  // what crossing it says
};

struct ClassProfile {
  OpClass op_class = OpClass::kGemm;
  int ops_per_step = 0;
  double time_us = 0;     // timed device time over the window
  double time_share = 0;  // of all timed op time
  double flops = 0, bytes = 0;
  double intensity = 0;  // FLOPs per byte
  double flops_per_s = 0, bytes_per_s = 0;
  double mfu = 0, mbu = 0;         // achieved rate over the calibrated ceiling
  double roofline_efficiency = 0;  // roofline floor time / measured time
  bool compute_side = false;       // intensity above the ridge
};

struct Profile {
  double window_s = 0;
  int steps = 0;
  int summed_steps = 0;  // of steps, those counted from the ring's per-second sums
  double steps_per_s = 0;
  double prefill_tokens_per_s = 0, decode_tokens_per_s = 0, tokens_per_s = 0;
  double output_tokens_per_s = 0;  // sampled (generated) tokens: what clients receive
  // The plan's bases (docs/DIAGNOSTICS.md, "Plan"): tokens requests got per second of the
  // steps themselves, idle time left out. Of pure decode steps (a decode-only prediction), and
  // of every step that carries decodes (a prediction with the request mix, as PlanTracker
  // measures it). 0: no such step.
  double decode_step_tokens_per_s = 0, decoding_step_tokens_per_s = 0;
  double mean_batch_seqs = 0, mean_batch_tokens = 0;
  double mean_step_ms = 0;
  double mean_decode_step_ms = 0;  // steps with no prefill: the TPOT/ITL they imply
  double mean_context = 0;         // per decoding sequence
  // Time shares of the window span.
  double busy_fraction = 0;  // device busy / span: what nvidia-smi would call utilisation
  double idle_share = 0;     // no step running: the engine waits for requests
  double host_share = 0;     // schedule + prepare + postprocess + loop gaps
  double loop_gap_us = 0;    // short gaps between steps: the engine loop's own overhead
  double edge_busy_us = 0;   // steps overlapping the window's edges (incl. one in flight)
  double launch_share = 0;   // op count x calibrated dispatch cost
  // Achieved rates over the span, and as shares of the calibrated ceilings.
  double flops_per_s = 0, bytes_per_s = 0;
  double mfu = 0, mbu = 0;
  double intensity = 0, ridge = 0;   // FLOPs/byte of the window's work; calibrated ridge
  double q8_0_gemm_flops_per_s = 0;  // calibrated peak with q8_0 weights (0: not measured)
  // Calibrated q8_0 weight streams at 1 and 8 input rows, bytes/s (0: not measured).
  double q8_0_stream_bytes_per_s = 0, q8_0_stream8_bytes_per_s = 0;
  // Serving state.
  double mean_queue_depth = 0;
  int max_queue_depth = 0;
  double mean_running = 0;
  double kv_usage = 0, kv_usage_max = 0;
  int preemptions = 0;
  // CUDA graphs.
  double graph_hit_rate = 0;  // replayed / uniform-decode steps
  double padding_waste = 0;   // padding rows / rows processed in replayed steps
  // Prefix caching (StepRecord::prefix_*): of the tokens looked up when requests were admitted,
  // the share found in cached blocks, and those tokens per second of the window: taken (not
  // computed) with caching on, missed with it off. Either may be 0.
  double prefix_hit_rate = 0, prefix_saved_tokens_per_s = 0;
  double prefix_missed_rate = 0, prefix_missed_tokens_per_s = 0;
  double prefill_step_share = 0;  // of step time, the steps that carry prefill
  // Speculative decoding (StepRecord::spec_*; with it off, the scheduler's scored proposals,
  // shadow_*): of the decodes, the share that proposed; tokens proposed per proposal; of them
  // the share kept (acceptance rate) and the mean kept per proposal; kept tokens per second.
  bool speculating = false;  // the window's steps ran with speculation on
  double spec_proposal_rate = 0, spec_mean_drafted = 0;
  double spec_acceptance_rate = 0, spec_mean_accepted = 0;
  double spec_accepted_tokens_per_s = 0;
  std::vector<ClassProfile> classes;
};

// An op class holding the step below its roof (classify.cc, "Headroom named").
struct Headroom {
  OpClass op_class = OpClass::kGemm;
  double step_share = 0;           // share of step time the class costs
  double roofline_efficiency = 0;  // its roofline floor / its measured time
  double step_saved_share = 0;     // share of step time saved if it reached its roof
  double speedup = 1;              // tokens/s ratio that would give
};

// Tensor parallelism over the window (AnalyzerContext::tp, rank 0's step records): where the
// steps' time went between the ranks (docs/DIAGNOSTICS.md, "Tensor parallelism").
struct TensorParallelProfile {
  int ranks = 0;  // 0: not tensor parallel
  std::string transport;
  bool single_host = true;  // the ranks share one host's memory bandwidth
  int64_t steps = 0;        // steps every rank logged in the window
  double collectives_per_step = 0;
  double mean_collective_us = 0;     // rank 0's
  double mean_collective_bytes = 0;  // moved by each rank (op_cost.h: AllReduce)
  double comm_share = 0;             // rank 0's collective time / its step time
  double wait_share = 0;             // of all ranks' collective time, waiting for slower ranks
  double transfer_share = 0;         // the rest: moving the bytes
  double load_balance = 1;           // mean compute / max compute over the ranks
  int slowest_rank = 0;
  double slowest_over_fastest = 1;  // compute time, slowest rank / fastest
  // Of the time the slowest rank's threads were runnable, the share they had a core (its
  // schedstat); -1 where not measured. Under 0.9 the rank is slow because it waited for a core.
  double slowest_run_share = -1;
  double comm_vs_roofline_floor = 0;  // transfer time / the step's roofline floor
  // An all-reduce's transfer (the least any rank spent in it) over the calibrated link's time
  // for the window's mean message (Calibration::AllReduceUs): over 1, the link ran slower than
  // calibrated (contention); 0 where not calibrated or not logged.
  double transfer_us = 0, calibrated_us = 0, transfer_vs_calibrated = 0;
};

struct Verdict {
  Bottleneck bottleneck = Bottleneck::kUnknown;
  Bottleneck step_bound = Bottleneck::kUnknown;  // what bounds the steps that do run
  std::vector<Signal> signals;
  std::string summary;
  // Over step time (idle excluded): how close the steps that ran are to each roof.
  double step_mfu = 0, step_mbu = 0;
  bool far_below_roofs = false;    // under AnalyzerThresholds::far_below_roofs of both
  std::vector<Headroom> headroom;  // classes furthest below their roof, largest loss first
  std::string window_note;         // the window was too short / widened / a step was in flight
  // Contention: the share of their runnable time the steps' threads had a core (StepRecord
  // sched_*), or AnalyzerContext::run_share where no step measured it; in [0.05, 1].
  double run_share = 1;
  CalibrationCheck calibration_check;
  // The engine thread's host phases, microseconds per busy step (the host-bound evidence).
  struct HostPhases {
    double schedule_us = 0, prepare_us = 0, postprocess_us = 0, loop_gap_us = 0;
    // The overlapped loop hid part of schedule and postprocess (their values above are what
    // the device still waited for).
    bool overlapped = false;
    bool device_async = false;  // the backend runs ops asynchronously (CUDA): overlap can help
  } host_per_step;
  TensorParallelProfile tensor_parallel;
};

// The server-side change for a host-bound verdict: the largest host phase and what removes it
// (for postprocess, where the token events run: AnalyzerContext::event_thread).
std::string HostPathChange(const Verdict& v, bool event_thread);

enum class ActionKind {
  kEnableCudaGraphs,
  kRaiseMaxNumSeqs,
  kRaiseMaxNumBatchedTokens,
  kRaiseClientConcurrency,
  kEnablePrefixCaching,
  kSetSpeculativeTokens,
  kQuantizeWeights,    // applied by a restart (Action::restart_flags), not UpdateOptions
  kSetTensorParallel,  // a restart too: fewer ranks where they share one host's memory
  kCount
};
const char* ActionKindName(ActionKind k);  // "enable_cuda_graphs", ...

struct FailureMode {
  std::string name;  // kv_preemption, configured_limit, queue_demand, tpot_slo,
                     // graph_memory, padding_waste, latency, restart, accuracy, ...
  double at = 0;     // the batch / tokens / bytes where it bites
  std::string detail;
};

struct Action {
  ActionKind kind = ActionKind::kRaiseMaxNumSeqs;
  std::string what;  // one line, e.g. "raise max_num_seqs 4 -> 48"
  double from = 0, to = 0;
  double tokens_per_s_before = 0, tokens_per_s_after = 0;
  double tpot_ms_before = 0, tpot_ms_after = 0;  // = ITL for decode
  double batch_after = 0;                        // decode batch the prediction assumes
  EngineOptions options_after;                   // engine options to apply
  // Non-empty: the action changes what UpdateOptions cannot (the weights' format), and is
  // applied by restarting the server with these flags added (e.g. "--quantization q8_0").
  std::string restart_flags;
  // Expected relative error of tokens_per_s_after (measured-curve spread, extrapolation
  // beyond the measured steps, mix model; step_curve.h) and whether the prediction left the
  // range of measured step shapes.
  double expected_error = 0;
  bool outside_measured = false;
  // Non-empty where no prediction can be trusted (expected_error over max_trusted_error): why,
  // and the measurement that would settle it. The figures above are kept (the plan tracker
  // holds the outcome against them), but reports print these instead of the after figures.
  std::string untrusted;
  std::string settle_by;
  double prefill_share = 0;  // predicted share of step time in steps carrying prefill
  MixPrediction mix_after;   // the request-mix prediction's parts (when prefill_share > 0)
  std::vector<FailureMode> tradeoffs;
};

struct Plan {
  std::vector<Action> actions;  // in the order to apply; each assumes the previous applied
  double batch_now = 0;         // mean decode batch now
  double context = 0;           // mean context per sequence the predictions assume
  double expected_seq_len = 0;  // final length per request (KV sizing)
  int kv_capacity_batch = 0;    // largest batch before the KV cache forces preemption
  int plateau_batch = 0;        // smallest batch reaching plateau_fraction of the plateau
  double plateau_tokens_per_s = 0;
  // The measured step shapes the predictions could look up: the largest decode batch and
  // prefill rows (window and probe together; 0: none), and whether probed points were used.
  double measured_max_batch = 0;
  double measured_max_prefill_rows = 0;
  bool used_probe = false;
  // Added to each probed decode point per row: sampling the window's requests did and the
  // probe's greedy steps did not (plan_predict.cc).
  double sampling_gap_us_per_row = 0;
  // How far the window's decode steps of the same rows moved from its first half to its second
  // (step_curve.h, WindowDrift); joins every action's expected error.
  double step_drift = 0;
  StepCurve curve;   // the merged curve the predictions looked up (step_curve.h)
  std::string note;  // why there is no action, when there is none
};

// Filled by PlanTracker (plan_tracker.h) when an applied action is being tracked.
struct TrackedOutcome {
  ActionKind kind = ActionKind::kRaiseMaxNumSeqs;
  std::string what;
  double applied_us = 0;
  // Steps measured after the change settled: decode-only ones, or, where the action was
  // predicted with the request mix (prefill_share > 0), every step carrying decodes; tokens/s
  // and TPOT are then the engine's output rate (rows sampled) and the mean step a request sees.
  int steady_steps = 0;
  bool settled = false;  // enough steady steps to judge
  double measured_batch = 0;
  double predicted_tokens_per_s = 0, measured_tokens_per_s = 0, tokens_per_s_error = 0;
  double predicted_tpot_ms = 0, measured_tpot_ms = 0, tpot_error = 0;
  // The stored model re-evaluated at the batch actually reached (separates model error
  // from the load not reaching the planned batch).
  double model_tokens_per_s_at_measured_batch = 0, model_error = 0;
  // How much slower (above 1) or faster the steady steps ran than the plan's measured curve
  // said steps of the same batch take: other load on the machine (which no batching model
  // predicts), or serving costs the probe steps did not see. 0 when no steady step's batch lies
  // inside the curve. drift_corrected_error is tokens_per_s_error with the prediction rescaled
  // by it: what is left is the plan's batching model (batch reached, request mix).
  double step_time_drift = 0, drift_corrected_error = 0;
  int drift_steps = 0;  // steady steps compared with the curve
};

struct DiagnosticsReport {
  double window_begin_us = 0, window_end_us = 0;
  Calibration calibration;
  Profile profile;
  Verdict verdict;
  StepModel model;
  Plan plan;
  std::optional<TrackedOutcome> tracked;
};

DiagnosticsReport Analyze(const std::vector<StepRecord>& steps, double window_begin_us,
                          double window_end_us, const Calibration& cal, const AnalyzerContext& ctx,
                          const AnalyzerThresholds& th = {});

// The pieces, for tests and for callers that want one part.
// What a recorded step paid to launch its work at the calibrated costs: one dispatch per op
// issued one by one, and one graph launch for all the ops a replay issued (a calibration
// without graph_launch_us counts a replay as one dispatch).
double LaunchUs(const StepRecord& step, const Calibration& cal);
double LaunchUs(const StepSums& sums, const Calibration& cal);  // the same, summed
// The window's sums: ctx.earlier, then `steps` (the gap from the earlier sums' last step to
// the first record counts as LoopGapUs).
StepSums SumWindow(const std::vector<StepRecord>& steps, const AnalyzerContext& ctx,
                   const AnalyzerThresholds& th);
Profile ComputeProfile(const std::vector<StepRecord>& steps, double window_begin_us,
                       double window_end_us, const Calibration& cal, const AnalyzerContext& ctx,
                       const AnalyzerThresholds& th = {});
Verdict Classify(const std::vector<StepRecord>& steps, const Profile& p, const Calibration& cal,
                 const AnalyzerContext& ctx, const AnalyzerThresholds& th);
// Compares the window's achieved rates (whole window over step time, each op class) with
// the ceilings; the judged ceilings are the calibrated ones raised to any observed maximum.
CalibrationCheck CheckCalibration(const std::vector<StepRecord>& steps, const Profile& p,
                                  const Calibration& cal, const AnalyzerContext& ctx,
                                  const AnalyzerThresholds& th);
Plan MakePlan(const std::vector<StepRecord>& steps, const Profile& p, const Verdict& v,
              const StepModel& model, const AnalyzerContext& ctx, const AnalyzerThresholds& th);

}  // namespace saturn
