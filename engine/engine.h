// The engine: a background step loop that owns the backend, the scheduler and the model runner.
//
//   Submit() --> incoming queue --> [step loop] Scheduler::Schedule -> StepPlan
//        -> ModelRunner::Launch / Finish (backend ops, graph replay, sampling) -> sampled tokens
//        -> Scheduler::Update -> token events (EventCallback) ; StepRecord -> StepRing
//
// This header is the engine's whole public face, small in the manner of TensorRT-LLM's
// executor.h: Submit, Cancel, UpdateOptions, Calibrate, ProbeSteps, Shutdown, and read-only
// values (info(), counters(), options(), the step ring, the latest probe). The backend, the
// runner and the scheduler live behind the pimpl (engine_impl.h) and only the engine thread
// touches them (but for the backend's telemetry, which any thread may read): whatever must run
// on the backend (calibration, probe steps) is an engine operation that runs on that thread
// between two steps. The public methods are thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/engine_info.h"
#include "engine/engine_options.h"
#include "engine/measure/calibration.h"
#include "engine/measure/step_probe.h"
#include "engine/measure/step_record.h"
#include "engine/measure/tp_stats.h"
#include "engine/request.h"
#include "kernels/base/clock.h"  // the clock of events and step records, for their readers
#include "kernels/comm/communicator.h"

namespace saturn {

struct EngineConfig {
  std::string model = "small";          // preset name or Hugging Face checkpoint directory
  uint64_t weight_seed = 1234;          // for presets
  std::string backend = "auto";         // auto | cpu | cuda
  int num_threads = 0;                  // CPU backend threads (0: all cores)
  std::string dtype = "auto";           // weights: auto | f32 | bf16 (CPU; auto: bf16 where native)
  std::string kv_cache_dtype = "auto";  // auto (the weights') | f32 | bf16 (CPU)
  // GEMM weights in llama.cpp's block formats, quantized at load (CPU): none | q8_0 | q4_0, or
  // auto: a GGUF file's own format where every layer matrix is q8_0 or q4_0 (so the file is
  // served at its own bytes per weight), q8_0 where they are all block-quantized in other
  // types (Q4_K_M), else none (GgufWeightFormat). q8_0/q4_0 set the weights' dtype, so an
  // explicit dtype other than auto beside them is refused.
  std::string quantization = "auto";
  std::string batch_invariant = "auto";   // auto (CPU on, CUDA off) | on | off: CreateBackend
  std::string cuda_kernels = "baseline";  // baseline | fused (aliases v1 | v2): CreateBackend
  size_t kv_cache_bytes = 0;              // 0: enough for max_num_seqs_limit full-length sequences,
                                          // capped at 1/8 of device memory
  int block_size = 16;
  int max_model_len = 0;  // 0: min(model context, 4096)
  EngineOptions options;
  int max_num_seqs_limit = 256;  // upper bounds UpdateOptions may raise to
  int max_num_batched_tokens_limit = 8192;
  std::vector<int> cuda_graph_sizes;  // empty: 1, 2, 4, 8, then steps of 8 to the limit
  size_t step_ring_capacity = 4096;   // newest steps that keep their per-op records (traces)
  // Memory for older steps' records (about 0.4 kB each, per-op records dropped), so a
  // diagnostics window reaches back minutes at any step rate: 64 MiB holds about 170k steps.
  size_t step_history_bytes = size_t{64} << 20;
  int per_op_timing_every = 8;  // where per-op device timing perturbs (CUDA), time every Nth step
  // Per-op device timing and step records. Always on when serving; off only to measure what
  // they cost (saturn-bench-instrumentation).
  bool instrument = true;
  // Token events (the server's stream writes) run on their own threads while the engine thread
  // starts the next step (on, or a thread count 1-16), or on the engine thread inside each
  // step's postprocess (off). auto: on where the backend leaves a core free for it (CUDA; a CPU
  // backend with fewer threads than cores), off where its threads compute on every core.
  std::string event_thread = "auto";
  // The overlapped step loop (vLLM v1's async scheduling): the next step is scheduled while
  // the device runs the current one, and the current one's tokens are posted while the device
  // runs the next; a decode whose input is still on the device is fed from it (Scheduler,
  // ModelRunner::Launch). on | off | auto (on where the backend runs asynchronously: CUDA; off
  // where ops run as issued, where it could only delay every token by a step). auto is off
  // where options.num_speculative_tokens > 0 (speculation needs the plain loop; on refuses it).
  std::string async_scheduling = "auto";
  // The n-gram lengths speculation's proposer matches (engine/ngram_proposer.h), 1-8.
  static constexpr int kMaxPromptLookup = 8;
  int prompt_lookup_min = 1, prompt_lookup_max = 4;
  int max_queued_requests = 0;  // 0: unbounded; past it Submit returns RESOURCE_EXHAUSTED
  // Tensor parallelism (engine/tp/): the model's heads and SwiGLU split over this many ranks,
  // this engine being rank 0 of `tp_comm` (not owned; the launcher's world, which outlives the
  // engine) and the workers running engine/tp/tp_worker.h's loop. CPU backend only for now.
  static constexpr int kMaxTensorParallel = 64;
  int tensor_parallel = 1;
  Communicator* tp_comm = nullptr;

  absl::Status Validate() const;
};

// EngineConfig::event_thread parsed: 0 (off), a thread count, or one of these. The error names
// event_thread and what it accepts.
constexpr int kEventThreadAuto = -1, kEventThreadOn = -2, kMaxEventThreads = 16;
absl::StatusOr<int> ParseEventThread(const std::string& setting);
// EngineConfig::async_scheduling resolved for `backend_runs_async` (Backend::RunsAsync); the
// error names async_scheduling and what it accepts.
absl::StatusOr<bool> ResolveAsyncScheduling(const std::string& setting, bool backend_runs_async);

class Engine {
 public:
  // Creates the backend, loads the model, allocates the KV cache, warms up (one short
  // generation; captures graphs when enabled) and starts the step loop.
  static absl::StatusOr<std::unique_ptr<Engine>> Create(const EngineConfig& config);
  ~Engine();  // Shutdown()
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Validates and enqueues. Events arrive on `on_event`, in order, from an event thread
  // (engine/event_delivery.h; the engine thread with event_thread off); the last one is final
  // (length, stop, cancelled or error). Returns the engine's request id. INVALID_ARGUMENT names the
  // field; RESOURCE_EXHAUSTED when the queue is full; UNAVAILABLE after Shutdown.
  absl::StatusOr<int64_t> Submit(GenerateRequest request, EventCallback on_event);
  // Cancels wherever the request is; its final event (kCancelled) follows and its KV blocks
  // are returned before that event. Unknown or finished ids are ignored. `reason` kStop ends a
  // request at a stop condition only the caller sees (a stop string in the text): its final
  // event says kStop, and metrics count it as finished, not aborted.
  void Cancel(int64_t request_id, FinishReason reason = FinishReason::kCancelled);
  // Validates `options` against this engine (limits, backend ability), applies them at the
  // next step boundary and returns the options in force after that.
  absl::StatusOr<EngineOptions> UpdateOptions(const EngineOptions& options);
  // Measures the backend's ceilings (engine/measure/calibration.h) on the engine thread between two
  // steps: the engine is paused meanwhile, so the device is otherwise idle. `took_ms`
  // (optional) receives the time the measuring took, the wait for a running step left out.
  // Errors: UNAVAILABLE after Shutdown, the backend's errors.
  absl::StatusOr<Calibration> Calibrate(const CalibrationOptions& options = {},
                                        double* took_ms = nullptr);
  // Times synthetic decode and prefill steps through the runner on the engine thread between
  // two steps (engine/measure/step_probe.h), with KV blocks taken from and returned to the cache,
  // and keeps the result (step_probe()), laid over the previous one (MergeProbes: a partial
  // re-probe, e.g. only longer prefill chunks, keeps what it did not measure) and returned as
  // kept. Sizes are capped at this engine's limits. Errors:
  // INVALID_ARGUMENT naming the option, UNAVAILABLE after Shutdown, the runner's errors.
  absl::StatusOr<StepProbe> ProbeSteps(StepProbeOptions options);
  // Under tensor parallelism: where the steps that started in [begin_us, end_us] spent their
  // time on every rank (engine/measure/tp_stats.h), gathered from the workers on the engine
  // thread between two steps. An empty TpStats (ranks 0) without tensor parallelism. Errors:
  // UNAVAILABLE after Shutdown, the group's.
  absl::StatusOr<TpStats> TensorParallelStats(double begin_us, double end_us) const;
  // Stops accepting, cancels every request (each gets its final event), joins the loop.
  void Shutdown();

  // The model, limits, backend and KV cache, with the free blocks and the captured graphs
  // as they are now (a copy).
  EngineInfo info() const;
  // Backend::KernelPlan(): the GEMM kernels chosen so far. Not in info(), which request
  // validation reads: this builds a string under the planner's lock the step loop takes.
  std::string KernelPlan() const;
  // The device's recent busy share in [0, 1] from the backend's telemetry (NVML on CUDA),
  // read at the call; -1 where the backend has none or it cannot be read now.
  double device_utilization() const;
  EngineCounters counters() const;
  EngineOptions options() const;
  // The records of the latest steps (read-only; the ring locks itself).
  const StepRing& steps() const;
  // The latest probe (nullopt before the first).
  std::optional<StepProbe> step_probe() const;
  // Start time (steady clock, us) of the step running now; 0 when none is (a step in flight
  // at a diagnostics window's edge is busy time, not idle).
  double step_in_flight_since_us() const;

 private:
  struct Impl;  // engine_impl.h
  explicit Engine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Calibration as serving needs it: the model's own GEMM shape (a prefill chunk: the token
// budget, at most 512 rows, x hidden x intermediate) timed beside the square one, so the GEMM
// ceiling is not below what the model's prefill reaches.
CalibrationOptions ModelCalibrationOptions(const Engine& engine);

// In-process blocking consumer of one request's events (tools, tests, benches). Cancels the
// request on destruction if it has not finished.
class RequestStream {
 public:
  static absl::StatusOr<std::unique_ptr<RequestStream>> Open(Engine* engine,
                                                             GenerateRequest request);
  ~RequestStream();
  // Blocks for the next event; false once the final event has been returned.
  bool Next(TokenEvent* event);
  // Collects every event until the final one; returns the final event, tokens appended.
  TokenEvent Drain(std::vector<int>* tokens);
  int64_t id() const { return id_; }

 private:
  struct Channel;
  RequestStream() = default;
  Engine* engine_ = nullptr;
  int64_t id_ = 0;
  std::shared_ptr<Channel> ch_;
  bool done_ = false;
};

}  // namespace saturn
