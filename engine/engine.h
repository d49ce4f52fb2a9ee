// The engine: a background step loop that owns the scheduler and the model runner.
//
//   Submit() --> incoming queue --> [step loop] Scheduler::Schedule -> StepPlan
//        -> ModelRunner::Execute (backend ops, graph replay, sampling) -> sampled tokens
//        -> Scheduler::Update -> token events (EventCallback) ; StepRecord -> StepRing
//
// The API is small (TensorRT-LLM executor style): Submit, Cancel, UpdateOptions, Shutdown,
// and read-only views of its state. State lives on the engine thread; the public methods
// below are thread-safe unless noted.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/engine_options.h"
#include "engine/model_config.h"
#include "engine/model_runner.h"
#include "engine/request.h"
#include "engine/scheduler.h"
#include "engine/step_probe.h"
#include "engine/step_record.h"
#include "kernels/backend.h"
#include "kernels/clock.h"

namespace saturn {

struct EngineConfig {
  std::string model = "small";   // preset name or Hugging Face checkpoint directory
  uint64_t weight_seed = 1234;   // for presets
  std::string backend = "auto";  // auto | cpu | cuda
  int num_threads = 0;           // CPU backend threads (0: all cores)
  std::string dtype = "auto";    // weights: auto | f32 | bf16 (CPU; auto: bf16 where native)
  size_t kv_cache_bytes = 0;     // 0: enough for max_num_seqs_limit full-length sequences,
                                 // capped at 1/8 of device memory
  int block_size = 16;
  int max_model_len = 0;  // 0: min(model context, 4096)
  EngineOptions options;
  int max_num_seqs_limit = 256;  // upper bounds UpdateOptions may raise to
  int max_num_batched_tokens_limit = 8192;
  std::vector<int> cuda_graph_sizes;  // empty: 1, 2, 4, 8, then steps of 8 to the limit
  size_t step_ring_capacity = 4096;
  int per_op_timing_every = 8;  // where per-op device timing perturbs (CUDA), time every Nth step
  // Per-op device timing and step records. Always on when serving; off only to measure what
  // they cost (saturn-bench-instrumentation).
  bool instrument = true;
  int max_queued_requests = 0;  // 0: unbounded; past it Submit returns RESOURCE_EXHAUSTED

  absl::Status Validate() const;
};

struct KvStats {
  int block_size = 0;
  int num_blocks = 0;
  int blocks_free = 0;
  size_t bytes_per_block = 0;
  size_t capacity_bytes = 0;
};

struct EngineCounters {
  int64_t requests_submitted = 0;
  int64_t requests_finished = 0;  // any reason
  int64_t requests_cancelled = 0;
  int64_t requests_failed = 0;
  int64_t prompt_tokens = 0;            // of finished requests
  int64_t submitted_prompt_tokens = 0;  // of every accepted request, at Submit
  int64_t generation_tokens = 0;
  int64_t preemptions = 0;
  int num_waiting = 0;  // incl. submitted but not yet seen by the loop
  int num_running = 0;
  int64_t steps = 0;
};

class Engine {
 public:
  // Loads the model, creates the backend, allocates the KV cache, warms up (one short
  // generation; captures graphs when enabled) and starts the step loop.
  static absl::StatusOr<std::unique_ptr<Engine>> Create(const EngineConfig& config);
  ~Engine();  // Shutdown()
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Validates and enqueues. Events arrive on `on_event` from the engine thread; the last one
  // is final (length, stop, cancelled or error). Returns the engine's request id.
  // INVALID_ARGUMENT names the field; RESOURCE_EXHAUSTED when the queue is full;
  // UNAVAILABLE after Shutdown.
  absl::StatusOr<int64_t> Submit(GenerateRequest request, EventCallback on_event);
  // Cancels wherever the request is; its final event (kCancelled) follows and its KV blocks
  // are returned before that event. Unknown or finished ids are ignored.
  void Cancel(int64_t request_id);
  // Validates `options` against this engine (limits, backend ability), applies them at the
  // next step boundary and returns the options in force after that.
  absl::StatusOr<EngineOptions> UpdateOptions(const EngineOptions& options);
  // Runs `fn` on the engine thread between two steps (the engine is paused while it runs:
  // no step starts until it returns) and returns its status. Diagnostics use it to
  // recalibrate with the device otherwise idle. UNAVAILABLE after Shutdown.
  absl::Status RunBetweenSteps(std::function<absl::Status(Backend*)> fn);
  // Times synthetic decode and prefill steps through the runner on the engine thread between
  // two steps (engine/step_probe.h), with KV blocks taken from and returned to the cache, and
  // keeps the result (step_probe()). Sizes are capped at this engine's limits. Errors:
  // INVALID_ARGUMENT naming the option, UNAVAILABLE after Shutdown, the runner's errors.
  absl::StatusOr<StepProbe> ProbeSteps(StepProbeOptions options);
  // The latest probe (nullopt before the first).
  std::optional<StepProbe> step_probe() const;
  // Start time (steady clock, us) of the step running now; 0 when none is (a step in flight
  // at a diagnostics window's edge is busy time, not idle).
  double step_in_flight_since_us() const { return step_in_flight_since_us_.load(); }
  // Stops accepting, cancels every request (each gets its final event), joins the loop.
  void Shutdown();

  EngineOptions options() const;
  const EngineConfig& config() const { return config_; }
  const ModelConfig& model() const { return runner_->model(); }
  const Backend& backend() const { return *backend_; }
  Backend* mutable_backend() { return backend_.get(); }
  const ModelRunner& runner() const { return *runner_; }
  ModelLimits limits() const;
  KvStats kv_stats() const;
  // The captured CUDA graphs (sizes, capture time, memory); a copy, safe while the engine
  // thread captures.
  GraphInfo graph_info() const;
  EngineCounters counters() const;
  const StepRing& steps() const { return steps_; }

 private:
  struct Pending {
    int64_t id;
    GenerateRequest request;
    EventCallback on_event;
    double arrival_us;
  };
  // A request the loop knows about (engine thread only).
  struct Live {
    EventCallback on_event;
    RequestTimings timings;
    int prompt_tokens = 0;
    bool wants_prompt_logprobs = false;
    std::vector<PositionLogprobs> prompt_logprobs;  // gathered until the first token event
  };

  Engine(const EngineConfig& config, std::unique_ptr<Backend> backend);
  absl::Status Init();
  void Loop();
  // One step: returns false when there was nothing to do.
  bool Step();
  // Moves submitted requests into the scheduler and applies cancels (engine thread).
  void DrainIncoming(std::deque<Pending>* incoming, std::vector<int64_t>* cancels);
  absl::Status Warmup();
  void ApplyPendingOptions();
  // Delivers an event; a final event also forgets the request.
  void Emit(int64_t id, TokenEvent ev);
  // Keeps the step's prompt logprobs and attaches the logprobs to the step's events.
  void AttachLogprobs(const StepPlan& plan, RunnerOutput* out,
                      const std::vector<RequestUpdate>& updates, std::vector<TokenEvent>* events);
  // Ends every request in `ids` with `reason` (error text when kError).
  void EndRequests(const std::vector<int64_t>& ids, FinishReason reason, const std::string& error);

  EngineConfig config_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<ModelRunner> runner_;
  std::unique_ptr<Scheduler> scheduler_;  // engine thread only
  StepRing steps_;
  int num_kv_blocks_ = 0;

  mutable std::mutex mu_;
  std::condition_variable cv_;          // wakes the loop
  std::condition_variable options_cv_;  // wakes UpdateOptions callers
  std::deque<Pending> incoming_;        // guarded by mu_
  std::vector<int64_t> cancels_;        // guarded by mu_
  bool stopping_ = false;               // guarded by mu_
  EngineOptions options_;               // in force; guarded by mu_
  bool has_pending_options_ = false;    // guarded by mu_
  EngineOptions pending_options_;       // guarded by mu_
  int64_t options_epoch_ = 0;           // bumped when pending options are applied
  absl::Status options_error_;          // outcome of the last application
  int64_t next_id_ = 1;                 // guarded by mu_
  EngineCounters counters_;             // guarded by mu_
  GraphInfo graph_info_;  // guarded by mu_ (copy of the runner's, refreshed after captures)
  int kv_free_ = 0;       // guarded by mu_ (mirror of the scheduler's)
  std::optional<StepProbe> step_probe_;     // guarded by mu_
  std::unordered_map<int64_t, Live> live_;  // engine thread only
  int64_t step_id_ = 0;                     // engine thread only

  std::deque<std::function<void(bool run)>>
      between_steps_;  // guarded by mu_; run=false: shutting down
  std::atomic<double> step_in_flight_since_us_{0};

  std::thread loop_;
};

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
