// The engine loop: incoming queue -> scheduler -> runner -> scheduler update -> events, and one
// StepRecord per step. See engine.h for the data path.
#include "engine/engine.h"

#include <algorithm>
#include <chrono>
#include <future>
#include <iostream>

#include "absl/strings/str_cat.h"
#include "engine/step_record_build.h"
#include "engine/weights.h"
#include "kernels/clock.h"
#include "kernels/status_macros.h"

namespace saturn {

absl::Status EngineConfig::Validate() const {
  if (block_size < 1 || block_size > 256) {
    return absl::InvalidArgumentError("block_size: must be in [1, 256]");
  }
  if (max_num_seqs_limit < 1 || max_num_batched_tokens_limit < 1) {
    return absl::InvalidArgumentError(
        "max_num_seqs_limit/max_num_batched_tokens_limit: must be >= 1");
  }
  RETURN_IF_ERROR(CheckEngineOptions(options, max_num_seqs_limit, max_num_batched_tokens_limit));
  if (max_model_len < 0) return absl::InvalidArgumentError("max_model_len: must be >= 0");
  if (per_op_timing_every < 1) {
    return absl::InvalidArgumentError("per_op_timing_every: must be >= 1");
  }
  if (max_queued_requests < 0) {
    return absl::InvalidArgumentError("max_queued_requests: must be >= 0");
  }
  return absl::OkStatus();
}

Engine::Engine(const EngineConfig& config, std::unique_ptr<Backend> backend)
    : config_(config), backend_(std::move(backend)), steps_(config.step_ring_capacity) {}

absl::StatusOr<std::unique_ptr<Engine>> Engine::Create(const EngineConfig& config) {
  RETURN_IF_ERROR(config.Validate());
  ASSIGN_OR_RETURN(std::unique_ptr<Backend> backend,
                   CreateBackend(config.backend, config.num_threads, config.dtype));
  std::unique_ptr<Engine> engine(new Engine(config, std::move(backend)));
  RETURN_IF_ERROR(engine->Init());
  return engine;
}

absl::Status Engine::Init() {
  ASSIGN_OR_RETURN(ModelWeights weights, LoadModel(config_.model, config_.weight_seed));
  const ModelConfig& m = weights.config;
  const int max_len =
      config_.max_model_len > 0 ? config_.max_model_len : std::min(m.max_position_embeddings, 4096);
  if (max_len > m.max_position_embeddings) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_model_len: ", max_len, " exceeds the model's context of ", m.max_position_embeddings));
  }
  const DType dt = backend_->compute_dtype();
  const size_t per_block = ModelRunner::KvBytesPerBlock(m, config_.block_size, dt);
  size_t kv_bytes = config_.kv_cache_bytes;
  if (kv_bytes == 0) {
    const size_t blocks_full = static_cast<size_t>(config_.max_num_seqs_limit) *
                               ((max_len + config_.block_size - 1) / config_.block_size);
    kv_bytes = std::min(blocks_full * per_block, backend_->device_memory_bytes() / 8);
  }
  num_kv_blocks_ = static_cast<int>(kv_bytes / per_block);
  if (num_kv_blocks_ < 1) {
    return absl::InvalidArgumentError(absl::StrCat("kv_cache_bytes: ", kv_bytes,
                                                   " bytes hold no block (one block takes ",
                                                   per_block, " bytes)"));
  }
  RunnerConfig rc;
  rc.max_num_seqs_limit = config_.max_num_seqs_limit;
  rc.max_num_batched_tokens_limit =
      std::max(config_.max_num_batched_tokens_limit, config_.max_num_seqs_limit);
  rc.max_model_len = max_len;
  rc.block_size = config_.block_size;
  rc.num_kv_blocks = num_kv_blocks_;
  rc.graph_sizes = config_.cuda_graph_sizes;
  if (rc.graph_sizes.empty()) {
    for (int s : {1, 2, 4}) rc.graph_sizes.push_back(s);
    for (int s = 8; s <= config_.max_num_seqs_limit; s += 8) rc.graph_sizes.push_back(s);
  }
  ASSIGN_OR_RETURN(runner_, ModelRunner::Create(backend_.get(), weights, rc));
  SchedulerConfig sc;
  sc.max_num_seqs = config_.options.max_num_seqs;
  sc.max_num_batched_tokens = config_.options.max_num_batched_tokens;
  sc.max_model_len = max_len;
  sc.eos_token_id = m.eos_token_id;
  scheduler_ = std::make_unique<Scheduler>(sc, num_kv_blocks_, config_.block_size);
  if (config_.options.cuda_graphs) RETURN_IF_ERROR(runner_->SetUseGraphs(true));
  graph_info_ = runner_->graph_info();
  options_ = config_.options;
  RETURN_IF_ERROR(Warmup());
  loop_ = std::thread([this] { Loop(); });
  return absl::OkStatus();
}

// One short generation through the whole path, so first-request costs (page faults, thread
// start-up, lazy library init) stay out of serving. Its step records are dropped.
absl::Status Engine::Warmup() {
  GenerateRequest req;
  const int vocab = runner_->model().vocab_size;
  for (int i = 0; i < 8; ++i) req.prompt.push_back((i * 7 + 3) % vocab);
  req.sampling.max_tokens = 2;
  req.sampling.ignore_eos = true;
  absl::Status failure;
  live_[0].on_event = [&](const TokenEvent& ev) {
    if (ev.final && ev.finish_reason == FinishReason::kError)
      failure = absl::InternalError(ev.error);
  };
  scheduler_->Add(0, req);
  while (scheduler_->HasWork()) Step();
  steps_.Clear();
  step_id_ = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    counters_ = EngineCounters{};  // the warm-up is no request: it must not skew the mix
  }
  if (!failure.ok()) {
    return absl::Status(failure.code(), absl::StrCat("warm-up failed: ", failure.message()));
  }
  return absl::OkStatus();
}

Engine::~Engine() { Shutdown(); }

ModelLimits Engine::limits() const {
  return ModelLimits{runner_->model().vocab_size, scheduler_->config().max_model_len};
}

KvStats Engine::kv_stats() const {
  KvStats s;
  s.block_size = config_.block_size;
  s.num_blocks = num_kv_blocks_;
  std::lock_guard<std::mutex> lock(mu_);
  s.blocks_free = kv_free_;
  s.bytes_per_block =
      ModelRunner::KvBytesPerBlock(runner_->model(), config_.block_size, backend_->compute_dtype());
  s.capacity_bytes = s.bytes_per_block * static_cast<size_t>(num_kv_blocks_);
  return s;
}

EngineCounters Engine::counters() const {
  std::lock_guard<std::mutex> lock(mu_);
  EngineCounters c = counters_;
  c.num_waiting += static_cast<int>(incoming_.size());
  return c;
}

GraphInfo Engine::graph_info() const {
  std::lock_guard<std::mutex> lock(mu_);
  return graph_info_;
}

EngineOptions Engine::options() const {
  std::lock_guard<std::mutex> lock(mu_);
  return options_;
}

absl::StatusOr<int64_t> Engine::Submit(GenerateRequest request, EventCallback on_event) {
  const ModelLimits lim = limits();
  RETURN_IF_ERROR(ValidateRequest(request, lim));
  const int need = (static_cast<int>(request.prompt.size()) + request.sampling.max_tokens +
                    config_.block_size - 1) /
                   config_.block_size;
  if (need > num_kv_blocks_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_tokens: prompt + max_tokens needs ", need, " KV blocks but the cache holds ",
        num_kv_blocks_, " (", num_kv_blocks_ * config_.block_size, " tokens)"));
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (stopping_) return absl::UnavailableError("engine is shutting down");
  if (config_.max_queued_requests > 0 &&
      static_cast<int>(incoming_.size()) + counters_.num_waiting >= config_.max_queued_requests) {
    return absl::ResourceExhaustedError(
        absl::StrCat("queue: ", config_.max_queued_requests,
                     " requests are already waiting (max_queued_requests); retry later"));
  }
  const int64_t id = next_id_++;
  incoming_.push_back(Pending{id, std::move(request), std::move(on_event), NowUs()});
  ++counters_.requests_submitted;
  counters_.submitted_prompt_tokens += static_cast<int64_t>(incoming_.back().request.prompt.size());
  cv_.notify_one();
  return id;
}

void Engine::Cancel(int64_t request_id) {
  std::lock_guard<std::mutex> lock(mu_);
  cancels_.push_back(request_id);
  cv_.notify_one();
}

absl::StatusOr<EngineOptions> Engine::UpdateOptions(const EngineOptions& o) {
  RETURN_IF_ERROR(
      CheckEngineOptions(o, config_.max_num_seqs_limit, config_.max_num_batched_tokens_limit));
  if (o.cuda_graphs && !backend_->SupportsGraphs()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cuda_graphs: the ", backend_->name(),
        " backend cannot capture graphs; start the server with --backend=cuda on a GPU"));
  }
  std::unique_lock<std::mutex> lock(mu_);
  if (stopping_) return absl::UnavailableError("engine is shutting down");
  pending_options_ = o;
  has_pending_options_ = true;
  const int64_t target = options_epoch_ + 1;
  cv_.notify_one();
  options_cv_.wait(lock, [&] { return options_epoch_ >= target || stopping_; });
  if (options_epoch_ < target) return absl::UnavailableError("engine is shutting down");
  if (!options_error_.ok()) return options_error_;
  return options_;
}

absl::Status Engine::RunBetweenSteps(std::function<absl::Status(Backend*)> fn) {
  auto done = std::make_shared<std::promise<absl::Status>>();
  std::future<absl::Status> result = done->get_future();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return absl::UnavailableError("engine is shutting down");
    between_steps_.push_back([this, fn = std::move(fn), done](bool run) {
      done->set_value(run ? fn(backend_.get()) : absl::UnavailableError("engine is shutting down"));
    });
    cv_.notify_one();
  }
  return result.get();
}

absl::StatusOr<StepProbe> Engine::ProbeSteps(StepProbeOptions options) {
  RETURN_IF_ERROR(options.Validate());
  options.max_batch = std::min(options.max_batch, config_.max_num_seqs_limit);
  options.max_prefill_tokens =
      std::min({options.max_prefill_tokens, config_.max_num_batched_tokens_limit,
                scheduler_->config().max_model_len * config_.max_num_seqs_limit});
  // As most serving steps run: timed per op where that is cheap (CPU), else not.
  options.per_op_timing = config_.instrument && backend_->per_op_timing_is_cheap();
  absl::StatusOr<StepProbe> probe;
  RETURN_IF_ERROR(RunBetweenSteps([&](Backend*) {
    probe = RunStepProbe(runner_.get(), scheduler_->mutable_blocks(),
                         scheduler_->config().max_model_len, options);
    return probe.status();
  }));
  std::lock_guard<std::mutex> lock(mu_);
  step_probe_ = *probe;
  return probe;
}

std::optional<StepProbe> Engine::step_probe() const {
  std::lock_guard<std::mutex> lock(mu_);
  return step_probe_;
}

void Engine::Shutdown() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_ && !loop_.joinable()) return;
    stopping_ = true;
    cv_.notify_all();
    options_cv_.notify_all();
  }
  if (loop_.joinable()) loop_.join();
}

void Engine::Loop() {
  std::deque<std::function<void(bool)>> tasks;
  for (;;) {
    std::deque<Pending> incoming;
    std::vector<int64_t> cancels;
    bool apply_options = false;
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (!scheduler_->HasWork()) {
        cv_.wait(lock, [&] {
          return stopping_ || !incoming_.empty() || !cancels_.empty() || has_pending_options_ ||
                 !between_steps_.empty();
        });
      }
      if (stopping_) break;
      incoming.swap(incoming_);
      cancels.swap(cancels_);
      apply_options = has_pending_options_;
      tasks.swap(between_steps_);
    }
    for (auto& task : tasks) task(true);
    tasks.clear();
    DrainIncoming(&incoming, &cancels);
    if (apply_options) ApplyPendingOptions();
    Step();
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    tasks.swap(between_steps_);
  }
  for (auto& task : tasks) task(false);
  // Shutdown: everything still known ends as cancelled, blocks returned first.
  std::deque<Pending> incoming;
  {
    std::lock_guard<std::mutex> lock(mu_);
    incoming.swap(incoming_);
  }
  std::vector<int64_t> cancels;
  DrainIncoming(&incoming, &cancels);
  std::vector<int64_t> ids;
  for (const auto& [id, live] : live_) ids.push_back(id);
  EndRequests(ids, FinishReason::kCancelled, "");
}

void Engine::DrainIncoming(std::deque<Pending>* incoming, std::vector<int64_t>* cancels) {
  for (Pending& p : *incoming) {
    Live& live = live_[p.id];
    live.on_event = std::move(p.on_event);
    live.timings.arrival_us = p.arrival_us;
    live.prompt_tokens = static_cast<int>(p.request.prompt.size());
    live.wants_prompt_logprobs = p.request.sampling.prompt_logprobs >= 0;
    scheduler_->Add(p.id, p.request);
  }
  std::vector<int64_t> known;
  for (int64_t id : *cancels) {
    if (live_.count(id)) known.push_back(id);
  }
  EndRequests(known, FinishReason::kCancelled, "");
}

void Engine::ApplyPendingOptions() {
  EngineOptions o;
  {
    std::lock_guard<std::mutex> lock(mu_);
    o = pending_options_;
    has_pending_options_ = false;
  }
  scheduler_->SetLimits(o.max_num_seqs, o.max_num_batched_tokens);
  absl::Status s = runner_->SetUseGraphs(o.cuda_graphs);
  if (!s.ok()) o.cuda_graphs = runner_->use_graphs();
  std::lock_guard<std::mutex> lock(mu_);
  graph_info_ = runner_->graph_info();
  options_ = o;
  options_error_ = s;
  ++options_epoch_;
  options_cv_.notify_all();
}

void Engine::Emit(int64_t id, TokenEvent ev) {
  auto it = live_.find(id);
  if (it == live_.end()) return;
  Live& live = it->second;
  if (!ev.token_ids.empty() && live.timings.first_token_us == 0) {
    live.timings.first_token_us = ev.time_us;
    if (live.wants_prompt_logprobs) ev.prompt_logprobs = std::move(live.prompt_logprobs);
  }
  if (ev.final) {
    live.timings.finished_us = ev.time_us;
    ev.timings = live.timings;
    ev.usage.prompt_tokens = live.prompt_tokens;
  }
  if (live.on_event) live.on_event(ev);
  if (ev.final) live_.erase(it);
}

void Engine::EndRequests(const std::vector<int64_t>& ids, FinishReason reason,
                         const std::string& error) {
  int64_t cancelled = 0, failed = 0;
  for (int64_t id : ids) {
    if (!live_.count(id)) continue;
    scheduler_->Cancel(id);  // returns its KV blocks before the final event goes out
    TokenEvent ev;
    ev.final = true;
    ev.finish_reason = reason;
    ev.error = error;
    ev.time_us = NowUs();
    Emit(id, std::move(ev));
    (reason == FinishReason::kError ? failed : cancelled)++;
  }
  std::lock_guard<std::mutex> lock(mu_);
  counters_.requests_cancelled += cancelled;
  counters_.requests_failed += failed;
  counters_.requests_finished += cancelled + failed;
  counters_.num_waiting = scheduler_->num_waiting();
  counters_.num_running = scheduler_->num_running();
  kv_free_ = scheduler_->blocks().num_free();
}

void Engine::AttachLogprobs(const StepPlan& plan, RunnerOutput* out,
                            const std::vector<RequestUpdate>& updates,
                            std::vector<TokenEvent>* events) {
  std::unordered_map<int64_t, SeqLogprobs*> by_id;
  for (size_t i = 0; i < plan.seqs.size() && i < out->logprobs.size(); ++i) {
    SeqLogprobs& lp = out->logprobs[i];
    by_id[plan.seqs[i].request_id] = &lp;
    auto it = live_.find(plan.seqs[i].request_id);
    if (it == live_.end() || lp.prompt.empty()) continue;
    auto& kept = it->second.prompt_logprobs;
    kept.insert(kept.end(), std::make_move_iterator(lp.prompt.begin()),
                std::make_move_iterator(lp.prompt.end()));
  }
  for (size_t k = 0; k < updates.size(); ++k) {
    const RequestUpdate& u = updates[k];
    auto it = by_id.find(u.request_id);
    if (u.new_tokens.empty() || it == by_id.end() || !it->second->sampled.has_value()) continue;
    (*events)[k].logprobs.push_back(std::move(*it->second->sampled));
  }
}

bool Engine::Step() {
  StepRecord rec;
  rec.start_us = NowUs();
  step_in_flight_since_us_ = rec.start_us;
  struct InFlight {  // cleared on every return
    std::atomic<double>* since;
    ~InFlight() { *since = 0; }
  } in_flight{&step_in_flight_since_us_};
  StepPlan plan = scheduler_->Schedule();
  rec.schedule_us = NowUs() - rec.start_us;
  if (plan.empty()) {
    // Work exists but nothing fits this step (cannot happen with validated requests, but
    // never spin): yield briefly.
    if (scheduler_->HasWork()) std::this_thread::sleep_for(std::chrono::microseconds(200));
    return false;
  }
  for (const ScheduledSeq& s : plan.seqs) {
    auto it = live_.find(s.request_id);
    if (it != live_.end() && it->second.timings.first_scheduled_us == 0) {
      it->second.timings.first_scheduled_us = rec.start_us;
    }
  }
  const int64_t id = step_id_++;
  const bool per_op = config_.instrument &&
                      (backend_->per_op_timing_is_cheap() || id % config_.per_op_timing_every == 0);
  absl::StatusOr<RunnerOutput> out = runner_->Execute(plan, per_op);
  if (!out.ok()) {
    // A failed step fails the requests in it; the engine keeps serving the others.
    std::cerr << "saturn: step " << id << " failed: " << out.status() << "\n";
    std::vector<int64_t> ids;
    for (const ScheduledSeq& s : plan.seqs) ids.push_back(s.request_id);
    EndRequests(ids, FinishReason::kError, std::string(out.status().message()));
    return true;
  }
  const double post0 = NowUs();
  std::vector<RequestUpdate> updates = scheduler_->Update(plan, out->sampled);
  std::vector<TokenEvent> events(updates.size());
  if (!out->logprobs.empty()) AttachLogprobs(plan, &*out, updates, &events);
  int64_t generated = 0, finished = 0;
  for (size_t k = 0; k < updates.size(); ++k) {
    RequestUpdate& u = updates[k];
    TokenEvent& ev = events[k];
    ev.token_ids = std::move(u.new_tokens);
    ev.time_us = post0;
    generated += static_cast<int64_t>(ev.token_ids.size());
    if (u.finish != FinishReason::kNone) {
      ev.final = true;
      ev.finish_reason = u.finish;
      ev.usage = u.usage;
      ++finished;
    }
  }
  rec.step_id = id;
  RecordStepWork(plan, &*out, &rec);
  RecordServingState(*scheduler_, &rec);
  // The counters first, the events after: a client that has seen its final event reads
  // counters (GetServerInfo, /metrics) that already include its request.
  {
    std::lock_guard<std::mutex> lock(mu_);
    rec.options = EngineOptions{options_.max_num_seqs, options_.max_num_batched_tokens,
                                runner_->use_graphs()};
    counters_.generation_tokens += generated;
    counters_.requests_finished += finished;
    counters_.preemptions += static_cast<int64_t>(plan.preempted.size());
    for (const RequestUpdate& u : updates) {
      if (u.finish != FinishReason::kNone) counters_.prompt_tokens += u.usage.prompt_tokens;
    }
    counters_.num_waiting = rec.queue_depth;
    counters_.num_running = rec.num_running;
    counters_.steps = id + 1;
    kv_free_ = rec.kv_blocks_free;
  }
  for (size_t k = 0; k < updates.size(); ++k) Emit(updates[k].request_id, std::move(events[k]));
  rec.end_us = NowUs();
  rec.postprocess_us = rec.end_us - post0;
  if (config_.instrument) steps_.Push(std::move(rec));
  return true;
}

// ---- RequestStream ----------------------------------------------------------------------

struct RequestStream::Channel {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<TokenEvent> events;
};

absl::StatusOr<std::unique_ptr<RequestStream>> RequestStream::Open(Engine* engine,
                                                                   GenerateRequest request) {
  std::unique_ptr<RequestStream> s(new RequestStream());
  s->engine_ = engine;
  s->ch_ = std::make_shared<Channel>();
  std::shared_ptr<Channel> ch = s->ch_;
  ASSIGN_OR_RETURN(s->id_, engine->Submit(std::move(request), [ch](const TokenEvent& ev) {
    std::lock_guard<std::mutex> lock(ch->mu);
    ch->events.push_back(ev);
    ch->cv.notify_one();
  }));
  return s;
}

RequestStream::~RequestStream() {
  if (!done_ && engine_ != nullptr) engine_->Cancel(id_);
}

bool RequestStream::Next(TokenEvent* event) {
  if (done_) return false;
  std::unique_lock<std::mutex> lock(ch_->mu);
  ch_->cv.wait(lock, [&] { return !ch_->events.empty(); });
  *event = std::move(ch_->events.front());
  ch_->events.pop_front();
  if (event->final) done_ = true;
  return true;
}

TokenEvent RequestStream::Drain(std::vector<int>* tokens) {
  TokenEvent ev;
  while (Next(&ev)) {
    if (tokens) tokens->insert(tokens->end(), ev.token_ids.begin(), ev.token_ids.end());
    if (ev.final) break;
  }
  return ev;
}

}  // namespace saturn
