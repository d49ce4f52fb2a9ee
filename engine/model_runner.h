// The model runner: turns a StepPlan into backend ops for one forward pass of the Llama
// decoder over the paged KV cache, then samples. It owns the device weights, the KV cache
// memory and the static input/activation buffers (allocated once at their upper bounds, so
// their addresses never change and decode steps can be captured as CUDA graphs).
//
// Per step: build flat host inputs (ids, positions, KV slots, attention metadata, sampling
// params) -> one upload each -> embedding -> N x [norm, qkv gemm, rope, kv write, attention,
// o gemm, add+norm, gate_up gemm, swiglu, down gemm] -> final norm of the rows that sample ->
// lm head gemm -> sample -> download the sampled tokens (the step's only host round trip).
// Launch issues all of it (the download queued behind the step); Finish waits for it, so the
// engine may schedule the next step while the device runs this one.
//
// Uniform decode steps (every sequence decodes one token) replay a captured graph when graphs
// are on: the batch is padded to the next captured size; padding rows read and write a
// reserved scratch KV block and are discarded. Prefill and mixed steps run eagerly.
//
// A step in which some request asks for logprobs runs eagerly and adds host round trips:
// the sampled rows' logits are downloaded before the sampling op (the same op as in any
// step), and prompt rows that ask go through the final norm and lm head again afterwards,
// downloaded in chunks. Steps without such requests pay none of this.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/engine_info.h"
#include "engine/measure/calibration.h"
#include "engine/measure/tp_stats.h"
#include "engine/model/model_config.h"
#include "engine/model/weights.h"
#include "engine/scheduler.h"
#include "engine/tp/tp_protocol.h"
#include "kernels/backend.h"
#include "kernels/schedstat.h"

namespace saturn {

struct RunnerConfig {
  int max_num_seqs_limit = 256;  // static buffers are sized for these upper bounds
  int max_num_batched_tokens_limit = 8192;
  int max_model_len = 2048;
  int block_size = 16;
  int num_kv_blocks = 0;         // usable blocks (one more is reserved for padding)
  std::vector<int> graph_sizes;  // decode batch sizes to capture (any order)
  // Tensor parallelism (engine/tp/): this runner is rank tp_rank of tp_size and holds that
  // rank's shard (ShardWeights); the backend's communicator is the group. Rank 0 runs the
  // engine's steps and sends each to the workers (ranks above 0), which run it in ServeStep.
  int tp_rank = 0, tp_size = 1;
};

// The logprobs one plan seq asked for (see SamplingParams::logprobs / prompt_logprobs).
struct SeqLogprobs {
  std::vector<PositionLogprobs> prompt;  // one per ScheduledSeq::prompt_logprob_targets
  // The sampled tokens', when logprobs >= 0: one per row that sampled (a speculating seq's
  // proposal rows too; Scheduler::Update keeps the first ones).
  std::vector<PositionLogprobs> sampled;
};

struct RunnerOutput {
  std::vector<int> sampled;  // one token per plan seq with sample == true, in plan order
  // One entry per plan seq (plan order) when any seq of the step asked for logprobs, else
  // empty. Such steps run eagerly: the asking rows' logits are downloaded before sampling.
  std::vector<SeqLogprobs> logprobs;
  StepTiming timing;      // per-op records and device busy time from the backend
  double prepare_us = 0;  // host time building and uploading inputs
  bool graph_replayed = false;
  int graph_batch_size = 0;  // padded batch size when replayed
  int padding_tokens = 0;
};

class ModelRunner {
 public:
  // Uploads the weights (GEMM matrices in the backend's weight_dtype(), norms and the
  // embedding table in its compute_dtype()) and allocates the KV cache
  // and buffers. Fails cleanly if the device lacks the memory.
  // With tp_size > 1, `weights` is this rank's shard (ShardWeights) and the backend has the
  // group's communicator.
  static absl::StatusOr<std::unique_ptr<ModelRunner>> Create(Backend* backend,
                                                             const ModelWeights& weights,
                                                             const RunnerConfig& config);
  // Rank 0 of a group whose session opened tells the workers it is over (TpMessage::kStop).
  ~ModelRunner();
  // Rank 0: every rank agreed its shard loaded (AgreeTpStart), so the workers now wait for
  // steps and, when this runner goes, for kStop. Until then (a runner that failed half-built,
  // or a group that did not agree) its end sends nothing: the workers are not listening for it.
  void OpenTpSession() { tp_session_open_ = config_.tp_size > 1 && config_.tp_rank == 0; }

  // A worker (tp_rank > 0): receives the step `header` announces and runs its shard of the
  // forward pass, its vocabulary slice of the LM head included (rank 0 samples). Its collectives
  // stay in this rank's log (CollectTpStats).
  absl::Status ServeStep(const TpHeader& header);
  // A worker: its slice of the logits of the rows rank 0 names, from the step it served last
  // (TpMessage::kLogits: a logprobs step's prompt rows), gathered on rank 0.
  absl::Status ServeLogits(const TpHeader& header);
  // A worker: sends rank 0 its log of the steps from header.seq on (TpMessage::kFetch).
  absl::Status ServeFetch(const TpHeader& header);
  // Rank 0 of a group, between steps: every rank's log of the steps that started in
  // [begin_us, end_us], combined (a collective: the workers answer with ServeFetch).
  absl::StatusOr<TpStats> CollectTpStats(double begin_us, double end_us);
  // Rank 0 of a group, between steps: times the group's all-reduce at the model's message sizes
  // (1 to 512 rows of the hidden size, f32; best of 3 trials of 20 calls each) and fits latency
  // + bus bytes / bandwidth into `cal` (a collective: the workers run ServeCommProbe).
  absl::Status CalibrateAllReduce(Calibration* cal);
  absl::Status ServeCommProbe(const TpHeader& header);
  // Test-only: this worker sleeps `us` in each step it serves, so tests can make a rank slow.
  void set_tp_test_delay_us(int64_t us) { tp_test_delay_us_ = tp_worker() ? us : 0; }
  // Test-only: rank 0's `n`-th step fails after it was shared (SATURN_TP_TEST_FAIL_STEP), so
  // tests see the group end instead of hang.
  void set_tp_test_fail_step(int64_t n) { tp_test_fail_step_ = config_.tp_size > 1 ? n : 0; }

  // Runs one step: Launch, then Finish. per_op_timing asks the backend for each op's device
  // interval.
  absl::StatusOr<RunnerOutput> Execute(const StepPlan& plan, bool per_op_timing);
  // Issues one step and returns without waiting for the device where the backend runs
  // asynchronously (CUDA); the sampled tokens are copied back behind the step. A seq with
  // feed_from >= 0 (Scheduler: its input is the token the previous step sampled) takes
  // prev_sampled[feed_from] as its last input. At most one step is launched at a time: the
  // caller calls Finish before the next Launch.
  absl::Status Launch(const StepPlan& plan, bool per_op_timing,
                      const std::vector<int>& prev_sampled = {});
  // Waits for the launched step and returns its output; `plan` is the one launched.
  absl::StatusOr<RunnerOutput> Finish(const StepPlan& plan);
  bool launched() const { return launched_.has_value(); }
  // The launched step may still be running on the device: the backend runs asynchronously and
  // Launch did not wait (a logprobs step downloads its logits, so it waited).
  bool step_queued() const {
    return launched_.has_value() && backend_->RunsAsync() && !launched_->logprobs;
  }
  // Like Execute but also returns the logits (f32 [R, vocab], R = seqs that sample, in plan
  // order) before sampling; always eager. For tests and tools.
  absl::StatusOr<RunnerOutput> ExecuteWithLogits(const StepPlan& plan, std::vector<float>* logits);

  // Captures one graph per configured size, largest first. Requires backend graph support.
  absl::Status CaptureGraphs();
  // Switches graph replay on or off without re-capturing (captures first if never done).
  absl::Status SetUseGraphs(bool on);
  bool use_graphs() const { return use_graphs_; }
  bool SupportsGraphs() const;  // the backend can capture graphs
  const GraphInfo& graph_info() const { return graph_info_; }

  const ModelConfig& model() const { return model_; }
  // The shape this rank computes: model() with heads and the SwiGLU width divided by tp_size.
  const ModelConfig& shard() const { return shard_; }
  size_t weight_bytes() const { return weight_bytes_; }
  size_t kv_cache_bytes() const { return kv_cache_bytes_; }
  // Bytes one KV block takes over all layers (K and V), on each of tp_size ranks.
  static size_t KvBytesPerBlock(const ModelConfig& m, int block_size, DType dtype, int tp_size = 1);

 private:
  struct DeviceWeights;
  struct Buffers;
  ModelRunner(Backend* backend, const ModelConfig& model, const RunnerConfig& config);

  absl::Status UploadWeights(const ModelWeights& w);
  absl::Status AllocateBuffers();
  // Fills and uploads the step inputs for `plan`, padded to `padded_seqs` decode rows when
  // > 0. Returns the number of rows that sample.
  absl::StatusOr<int> PrepareInputs(const StepPlan& plan, int padded_seqs,
                                    const std::vector<int>& prev_sampled);
  // Issues the forward pass and sampling for the prepared inputs; in a tensor-parallel group,
  // rank 0 shares the step first, and a step that fails after that ends every rank
  // (Communicator::Abort).
  absl::Status Forward(int num_tokens, int num_seqs, int num_sample_rows, int max_query_len,
                       int max_context_len, bool keep_logits);
  absl::Status ForwardOps(int num_tokens, int num_seqs, int num_sample_rows, int max_query_len,
                          int max_context_len, bool keep_logits);
  // Draws the tokens of the logits rows Forward(keep_logits = true) left.
  absl::Status SampleRows(int num_sample_rows);
  // After Forward(keep_logits = true) in a step where some seq asks for logprobs: downloads
  // the sampled rows' logits, samples them as usual, then computes the prompt rows' logprobs;
  // fills out->logprobs (the sampled tokens' own entries once the tokens are downloaded).
  absl::Status SampleWithLogprobs(const StepPlan& plan, int num_sample_rows, RunnerOutput* out);
  // Logits of the prompt rows that asked, in chunks of at most max_seqs rows through the
  // final-norm/lm-head buffers (after sampling, so the sampled rows are untouched).
  absl::Status PromptLogprobs(const StepPlan& plan, RunnerOutput* out);
  int GraphSizeFor(int num_seqs) const;  // 0 when no captured size fits
  // The final norm and the LM head over hidden rows `rows` (i32 [1, R], device) of a step of
  // `num_tokens`: logits [R, vocab] on rank 0; under tensor parallelism each rank's vocabulary
  // slice, gathered there.
  absl::Status LogitsOfRows(int num_tokens, const Tensor& rows);
  // Rank 0: tells the workers which rows' logits LogitsOfRows is about to take.
  absl::Status ShareLogitsRows(int num_tokens, const std::vector<int32_t>& rows);
  // Rank 0 of a group: sends the prepared step (Forward's arguments, the packed inputs) to the
  // workers.
  absl::Status ShareStep(int num_tokens, int num_seqs, int num_sample_rows, int max_query_len,
                         int max_context_len);
  bool tp_worker() const { return config_.tp_size > 1 && config_.tp_rank > 0; }

  Backend* backend_;
  ModelConfig model_;
  ModelConfig shard_;  // what this rank computes (model_ when tp_size is 1)
  RunnerConfig config_;
  std::vector<char> tp_message_;    // a step's packed inputs, sent or received
  int64_t tp_seq_ = 0;              // the last step shared (rank 0) or served (workers)
  double tp_step_start_us_ = 0;     // rank 0: when that step began
  std::deque<TpStepEntry> tp_log_;  // the newest steps' collectives (kTpLogSteps)
  // Appends the step just ended (its op records) to tp_log_.
  void LogTpStep(const StepTiming& timing);
  int64_t tp_test_delay_us_ = 0;   // set_tp_test_delay_us
  int64_t tp_test_fail_step_ = 0;  // set_tp_test_fail_step
  int64_t tp_forwards_ = 0;        // steps this rank ran in a group (for the above)
  bool tp_session_open_ = false;   // OpenTpSession
  // The threads that compute this rank's steps (the caller's and the backend's), read around
  // each step for TpStepEntry's run and wait; tracked at the first step.
  ThreadSchedSet tp_threads_;
  bool tp_threads_tracked_ = false;
  SchedStat tp_sched_at_start_;
  void MarkTpStepStart();
  std::unique_ptr<DeviceWeights> weights_;
  std::unique_ptr<Buffers> buf_;
  size_t weight_bytes_ = 0;
  size_t kv_cache_bytes_ = 0;
  bool use_graphs_ = false;
  GraphInfo graph_info_;
  std::vector<std::pair<int, int>> graphs_;  // (batch size, backend graph handle), ascending
  // The step between Launch and Finish: its output so far and the rows that sample.
  struct Launched {
    RunnerOutput out;
    int rows = 0;
    bool logprobs = false;
  };
  std::optional<Launched> launched_;
};

}  // namespace saturn
