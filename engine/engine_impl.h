// The Engine's private state (the pimpl behind engine/engine.h): the backend, the runner, the
// scheduler, the queues the public methods fill and the loop that drains them. Included only
// by the engine's own sources (engine.cc: creation and the public methods; engine_loop.cc:
// the step loop); nothing outside engine/ sees it.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "engine/engine.h"
#include "engine/event_delivery.h"
#include "engine/model_runner.h"
#include "engine/scheduler.h"
#include "kernels/backend.h"
#include "kernels/schedstat.h"

namespace saturn {

struct Engine::Impl {
  struct Pending {
    int64_t id;
    GenerateRequest request;
    EventCallback on_event;
    double arrival_us;
  };
  // A request the loop knows about (engine thread only).
  struct Live {
    std::shared_ptr<const EventCallback> on_event;  // shared with events not yet delivered
    RequestTimings timings;
    int prompt_tokens = 0;
    bool wants_prompt_logprobs = false;
    std::vector<PositionLogprobs> prompt_logprobs;  // gathered until the first token event
  };

  Impl(const EngineConfig& config, std::unique_ptr<Backend> backend);
  // Loads the model, builds the runner and the scheduler, warms up, starts the loop.
  absl::Status Init();
  // Init's tensor-parallel part: the workers told what to load, rank 0's shard built, and every
  // rank agreed that it loaded.
  absl::Status StartTensorParallel(ModelWeights weights, RunnerConfig rc);
  void FillFixedInfo(int max_model_len, size_t kv_bytes_per_block, std::vector<int> graph_sizes);
  absl::Status Warmup();
  // Runs `fn` on the engine thread between two steps (no step starts until it returns) and
  // returns its status. UNAVAILABLE after Shutdown.
  absl::Status RunBetweenSteps(std::function<absl::Status()> fn);

  // The public methods (engine.h says what each does).
  absl::StatusOr<int64_t> Submit(GenerateRequest request, EventCallback on_event);
  void Cancel(int64_t request_id, FinishReason reason);
  absl::StatusOr<EngineOptions> UpdateOptions(const EngineOptions& options);
  absl::StatusOr<Calibration> Calibrate(const CalibrationOptions& options, double* took_ms);
  absl::StatusOr<StepProbe> ProbeSteps(StepProbeOptions options);
  void Shutdown();
  EngineInfo info() const;
  std::string KernelPlan() const { return backend_->KernelPlan(); }  // thread-safe
  EngineCounters counters() const;
  EngineOptions options() const;
  std::optional<StepProbe> step_probe() const;

  // A step the runner launched and the loop has not finished (engine thread only).
  struct InFlight {
    StepPlan plan;
    int64_t step_id = 0;
  };

  // engine_loop.cc (engine thread).
  void Loop();
  // One turn of the loop: schedules the next step; finishes the step in flight, if any;
  // launches the next one; then updates, posts and records the finished one. Without
  // async_scheduling the step launched is finished in the same turn. A turn with nothing to
  // schedule and nothing in flight only yields (briefly, if work waits that does not fit).
  void Step();
  // Waits for the step in flight, if any, and completes it (a turn that launches nothing).
  void FinishInFlight();
  // A turn that launched a step and completed none (the first of a burst): the next completed
  // step's record starts at its start and adds its schedule time, so records tile the turns.
  struct OpenTurn {
    double start_us = 0;
    double schedule_us = 0;
    SchedStat sched0;
  };
  void TakeOpenTurn(StepRecord* rec, SchedStat* sched0);
  // The finished step's scheduler update, events, counters and record; `rec` holds the turn's
  // start, schedule time and CPU counters.
  void Complete(const InFlight& step, absl::StatusOr<RunnerOutput> out, StepRecord rec,
                const SchedStat& sched0);
  // A Cancel call: the request and the reason its final event gives (kCancelled or kStop).
  struct CancelOrder {
    int64_t id;
    FinishReason reason;
  };
  // Moves submitted requests into the scheduler and applies cancels.
  void DrainIncoming(std::deque<Pending>* incoming, std::vector<CancelOrder>* cancels);
  void ApplyPendingOptions();
  // Queues an event for delivery (PostEvents); a final event also forgets the request.
  void Emit(int64_t id, TokenEvent ev);
  // Hands the queued events to events_ in one batch; returns the microseconds it waited for
  // room (a delivery thread behind by a few steps).
  double PostEvents();
  // Keeps the step's prompt logprobs and attaches the logprobs to the step's events.
  void AttachLogprobs(const StepPlan& plan, RunnerOutput* out,
                      const std::vector<RequestUpdate>& updates, std::vector<TokenEvent>* events);
  // Ends every request in `ids` with `reason` (error text when kError).
  void EndRequests(const std::vector<int64_t>& ids, FinishReason reason, const std::string& error);
  // Tracks the engine thread and the backend's worker threads in sched_threads_ (once all
  // workers have started).
  void TrackSchedThreads();

  const EngineConfig config_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<ModelRunner> runner_;
  std::unique_ptr<Scheduler> scheduler_;  // engine thread only
  StepRing steps_;
  int num_kv_blocks_ = 0;
  std::string weight_dtype_;  // as CreateBackend was given it (a tensor-parallel worker's too)
  EngineInfo fixed_;          // the parts of info() fixed by Init

  mutable std::mutex mu_;
  std::condition_variable cv_;          // wakes the loop
  std::condition_variable options_cv_;  // wakes UpdateOptions callers
  std::deque<Pending> incoming_;        // guarded by mu_
  std::vector<CancelOrder> cancels_;    // guarded by mu_
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
  bool async_ = false;                      // EngineConfig::async_scheduling resolved at Init
  std::optional<InFlight> in_flight_;       // engine thread only: launched, not finished
  std::optional<OpenTurn> open_turn_;       // engine thread only
  ThreadSchedSet sched_threads_;            // engine thread only: the threads that run steps
  bool sched_complete_ = false;             // engine thread only: every worker tracked

  std::deque<std::function<void(bool run)>>
      between_steps_;  // guarded by mu_; run=false: shutting down
  std::atomic<double> step_in_flight_since_us_{0};

  EventDelivery::Batch outbox_;  // engine thread only: events emitted, not yet posted
  EventDelivery events_;         // runs the callbacks (its own thread once the loop runs)

  std::thread loop_;
};

}  // namespace saturn
