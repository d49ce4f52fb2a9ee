// Engine creation and the public methods off the request path: the facade (engine.h) forwards
// to the Impl (engine_impl.h), whose methods here check and queue work for the loop or run it
// there between two steps. Submit and Cancel live with the loop (engine_loop.cc), so a
// request's way through the engine is one file. See engine.h for the data path.
#include "engine/engine.h"

#include <algorithm>
#include <cstdlib>
#include <future>
#include <iostream>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "engine/engine_impl.h"
#include "engine/measure/step_probe_run.h"
#include "engine/model/weights.h"
#include "engine/tp/tp_shard.h"
#include "engine/tp/tp_worker.h"
#include "kernels/base/clock.h"
#include "kernels/base/split_mix64.h"
#include "kernels/base/status_macros.h"

namespace saturn {

absl::Status EngineConfig::Validate() const {
  if (block_size < 1 || block_size > 256) {
    return absl::InvalidArgumentError("block_size: must be in [1, 256]");
  }
  RETURN_IF_ERROR(CheckEngineLimits(max_num_seqs_limit, max_num_batched_tokens_limit));
  RETURN_IF_ERROR(CheckEngineOptions(options, max_num_seqs_limit, max_num_batched_tokens_limit));
  if (max_model_len < 0) return absl::InvalidArgumentError("max_model_len: must be >= 0");
  if (tensor_parallel < 1 || tensor_parallel > kMaxTensorParallel) {
    return absl::InvalidArgumentError(absl::StrCat("tensor_parallel: must be in [1, ",
                                                   kMaxTensorParallel, "], got ", tensor_parallel));
  }
  if (tensor_parallel > 1 &&
      (tp_comm == nullptr || tp_comm->size() != tensor_parallel || tp_comm->rank() != 0)) {
    return absl::FailedPreconditionError(
        absl::StrCat("tensor_parallel: ", tensor_parallel, " needs ", tensor_parallel,
                     " ranks started by an MPI launcher, this engine being rank 0 (",
                     tp_comm == nullptr ? "no group was given"
                                        : absl::StrCat("the group has ", tp_comm->size(), " ranks"),
                     "): mpirun -np ", tensor_parallel, " saturn-server --tensor_parallel ",
                     tensor_parallel, " ..."));
  }
  if (step_ring_capacity < 1 || step_history_bytes > (size_t{16} << 30)) {
    return absl::InvalidArgumentError(
        "step_ring_capacity: must be >= 1, and step_history_bytes at most 16 GiB");
  }
  if (per_op_timing_every < 1) {
    return absl::InvalidArgumentError("per_op_timing_every: must be >= 1");
  }
  if (max_queued_requests < 0) {
    return absl::InvalidArgumentError("max_queued_requests: must be >= 0");
  }
  RETURN_IF_ERROR(ParseEventThread(event_thread).status());
  if (prompt_lookup_min < 1 || prompt_lookup_max > kMaxPromptLookup ||
      prompt_lookup_min > prompt_lookup_max) {
    return absl::InvalidArgumentError(
        absl::StrCat("prompt_lookup_min, prompt_lookup_max: ", prompt_lookup_min, ", ",
                     prompt_lookup_max, " must satisfy 1 <= min <= max <= ", kMaxPromptLookup));
  }
  if (quantization != "auto" && quantization != "none" && quantization != "q8_0" &&
      quantization != "q4_0") {
    return absl::InvalidArgumentError(absl::StrCat("quantization: \"", quantization,
                                                   "\" is not one of auto, none, q8_0 or q4_0"));
  }
  if ((quantization == "q8_0" || quantization == "q4_0") && dtype != "auto" &&
      dtype != quantization) {
    return absl::InvalidArgumentError(absl::StrCat("quantization: ", quantization,
                                                   " sets the weights' dtype, and dtype says ",
                                                   dtype, "; give one of them"));
  }
  if (options.num_speculative_tokens > 0 && async_scheduling == "on") {
    return absl::InvalidArgumentError(
        "num_speculative_tokens: speculation needs the plain step loop; async_scheduling is on "
        "(use auto or off)");
  }
  return ResolveAsyncScheduling(async_scheduling, false).status();
}

absl::StatusOr<bool> ResolveAsyncScheduling(const std::string& setting, bool backend_runs_async) {
  if (setting == "auto") return backend_runs_async;
  if (setting == "on") return true;
  if (setting == "off") return false;
  return absl::InvalidArgumentError(
      absl::StrCat("async_scheduling: \"", setting, "\" is not one of auto, on or off"));
}

absl::StatusOr<int> ParseEventThread(const std::string& setting) {
  if (setting == "auto") return kEventThreadAuto;
  if (setting == "on") return kEventThreadOn;
  if (setting == "off") return 0;
  int n = 0;
  if (absl::SimpleAtoi(setting, &n) && n >= 1 && n <= kMaxEventThreads) return n;
  return absl::InvalidArgumentError(
      absl::StrCat("event_thread: \"", setting,
                   "\" is not one of auto, on, off or a thread count 1-", kMaxEventThreads));
}

namespace {

// What the KV depends on besides the tokens, for the first block's key: the model's shape and
// the cache's dtype (a server serves one checkpoint; this keeps keys honest if that changes).
uint64_t PrefixSalt(const ModelConfig& m, DType kv_dtype) {
  uint64_t h = SplitMix64(std::hash<std::string>{}(m.name));
  for (int64_t v : {int64_t{m.vocab_size}, int64_t{m.hidden_size}, int64_t{m.num_layers},
                    int64_t{m.num_kv_heads}, int64_t{m.head_dim}, static_cast<int64_t>(kv_dtype)}) {
    h = SplitMix64(h ^ static_cast<uint64_t>(v));
  }
  return h;
}

// EngineConfig::event_thread -> delivery threads (0: on the engine thread). auto is on unless
// the backend's threads compute on every core. on: the CPU's spare cores, at most 4; with a
// device computing, one per 8 cores, at most 4, leaving the rest to gRPC's threads (not yet
// measured on a GPU host).
int ResolveEventThreads(const std::string& setting, const Backend& backend) {
  const int parsed = ParseEventThread(setting).value_or(0);  // validated before
  if (parsed >= 0) return parsed;
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  if (backend.name() != "cpu") return std::clamp(cores / 8, 1, 4);
  const int spare = cores - static_cast<int>(backend.HostThreadIds().size()) - 1;  // + engine
  if (parsed == kEventThreadAuto && spare < 1) return 0;
  return std::clamp(spare, 1, 4);
}

}  // namespace

Engine::Impl::Impl(const EngineConfig& config, std::unique_ptr<Backend> backend)
    : config_(config),
      backend_(std::move(backend)),
      steps_(std::max(config.step_ring_capacity,
                      config.step_history_bytes / StepRing::kBytesPerRecord),
             config.step_ring_capacity) {}

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Engine::~Engine() { Shutdown(); }

namespace {

// The weights' dtype for CreateBackend: config.dtype, or the quantization's block format
// (auto: a GGUF file's own, where the CPU streams it as it is).
absl::StatusOr<std::string> WeightDType(const EngineConfig& config) {
  if (config.quantization == "q8_0" || config.quantization == "q4_0") return config.quantization;
  if (config.quantization != "auto" || config.dtype != "auto" || config.backend == "cuda" ||
      !absl::EndsWith(config.model, ".gguf") || PresetConfig(config.model).ok()) {
    return config.dtype;
  }
  ASSIGN_OR_RETURN(const GgufServing serving, GgufWeightFormat(config.model));
  if (serving.format.empty()) return config.dtype;
  std::cerr << "saturn: " << serving.note << "\n";
  return serving.format;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Engine>> Engine::Create(const EngineConfig& config) {
  RETURN_IF_ERROR(config.Validate());
  ASSIGN_OR_RETURN(const std::string weight_dtype, WeightDType(config));
  ASSIGN_OR_RETURN(
      std::unique_ptr<Backend> backend,
      CreateBackend(config.backend, config.num_threads, weight_dtype, config.kv_cache_dtype,
                    config.batch_invariant, config.cuda_kernels));
  if (config.tensor_parallel > 1) {
    if (backend->name() != "cpu") {
      return absl::UnimplementedError(
          absl::StrCat("tensor_parallel: the ", backend->name(),
                       " backend sums over NCCL, which is not built yet; use --backend=cpu"));
    }
    backend->SetCommunicator(config.tp_comm);
  }
  std::unique_ptr<Engine> engine(new Engine(std::make_unique<Impl>(config, std::move(backend))));
  engine->impl_->weight_dtype_ = weight_dtype;
  RETURN_IF_ERROR(engine->impl_->Init());
  return engine;
}

absl::Status Engine::Impl::Init() {
  ASSIGN_OR_RETURN(ModelWeights weights, LoadModel(config_.model, config_.weight_seed));
  const ModelConfig& m = weights.config;
  const int max_len =
      config_.max_model_len > 0 ? config_.max_model_len : std::min(m.max_position_embeddings, 4096);
  if (max_len > m.max_position_embeddings) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_model_len: ", max_len, " exceeds the model's context of ", m.max_position_embeddings));
  }
  if (max_len < 2) {  // a prompt token and a generated one
    return absl::InvalidArgumentError(absl::StrCat(
        "max_model_len: ", max_len, " leaves no room for a prompt token and a generated one"));
  }
  const int tp = config_.tensor_parallel;
  if (tp > 1) RETURN_IF_ERROR(CheckTensorParallel(m, tp));
  // Per rank: each holds its own KV heads, so the same bytes hold tp times the blocks.
  const size_t per_block =
      ModelRunner::KvBytesPerBlock(m, config_.block_size, backend_->kv_cache_dtype(), tp);
  size_t kv_bytes = config_.kv_cache_bytes;
  if (kv_bytes == 0) {
    const size_t blocks_full = static_cast<size_t>(config_.max_num_seqs_limit) *
                               ((max_len + config_.block_size - 1) / config_.block_size);
    kv_bytes = std::min(blocks_full * per_block, backend_->device_memory_bytes() / 8);
  }
  const size_t device_bytes = backend_->device_memory_bytes();
  if (device_bytes > 0 && kv_bytes > device_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("kv_cache_bytes: ", kv_bytes,
                                                   " bytes exceed the device's memory of ",
                                                   device_bytes, " bytes"));
  }
  if (kv_bytes / per_block > size_t{INT32_MAX}) {
    return absl::InvalidArgumentError(absl::StrCat("kv_cache_bytes: ", kv_bytes, " bytes make ",
                                                   kv_bytes / per_block,
                                                   " blocks, past the limit of 2^31 - 1"));
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
  if (tp == 1) {
    ASSIGN_OR_RETURN(runner_, ModelRunner::Create(backend_.get(), weights, rc));
  } else {
    RETURN_IF_ERROR(StartTensorParallel(std::move(weights), rc));
  }
  SchedulerConfig sc;
  sc.max_num_seqs = config_.options.max_num_seqs;
  sc.max_num_batched_tokens = config_.options.max_num_batched_tokens;
  sc.max_model_len = max_len;
  sc.eos_token_id = m.eos_token_id;
  sc.extra_eos_token_ids = m.extra_eos_token_ids;
  sc.enable_prefix_caching = config_.options.prefix_caching;
  sc.prefix_salt = PrefixSalt(m, backend_->kv_cache_dtype());
  sc.key_prompt_boundary = backend_->batch_invariant();
  sc.num_speculative_tokens = config_.options.num_speculative_tokens;
  sc.prompt_lookup_min = config_.prompt_lookup_min;
  sc.prompt_lookup_max = config_.prompt_lookup_max;
  sc.max_sample_rows = rc.max_num_seqs_limit;
  scheduler_ = std::make_unique<Scheduler>(sc, num_kv_blocks_, config_.block_size);
  if (config_.options.cuda_graphs) RETURN_IF_ERROR(runner_->SetUseGraphs(true));
  graph_info_ = runner_->graph_info();
  options_ = config_.options;
  FillFixedInfo(max_len, per_block, rc.graph_sizes);
  ASSIGN_OR_RETURN(async_, ResolveAsyncScheduling(config_.async_scheduling, backend_->RunsAsync()));
  if (async_ && config_.options.num_speculative_tokens > 0) {
    async_ = false;  // auto (Validate refused on): speculation runs in the plain loop
    std::cerr << "saturn: num_speculative_tokens " << config_.options.num_speculative_tokens
              << ": the plain step loop (async scheduling off)\n";
  }
  fixed_.async_scheduling = async_;
  RETURN_IF_ERROR(Warmup());
  fixed_.event_threads = ResolveEventThreads(config_.event_thread, *backend_);
  if (fixed_.event_threads > 0) events_.Start(fixed_.event_threads);
  loop_ = std::thread([this] { Loop(); });
  return absl::OkStatus();
}

absl::Status Engine::Impl::StartTensorParallel(ModelWeights weights, RunnerConfig rc) {
  Communicator* comm = config_.tp_comm;
  rc.tp_rank = 0;
  rc.tp_size = config_.tensor_parallel;
  TpStartConfig start;
  start.model = config_.model;
  start.weight_seed = config_.weight_seed;
  start.backend = backend_->name();
  start.weight_dtype = weight_dtype_;
  start.kv_cache_dtype = config_.kv_cache_dtype;
  start.batch_invariant = config_.batch_invariant;
  start.cuda_kernels = config_.cuda_kernels;
  start.num_threads = config_.num_threads;
  start.runner = rc;
  if (const char* delay = std::getenv("SATURN_TP_TEST_DELAY_US"); delay != nullptr) {
    start.test_delay_us = std::max(0LL, std::atoll(delay));  // test-only (tp_worker.h)
  }
  RETURN_IF_ERROR(SendTpStart(comm, start));
  absl::StatusOr<std::unique_ptr<ModelRunner>> runner =
      [&]() -> absl::StatusOr<std::unique_ptr<ModelRunner>> {
    ASSIGN_OR_RETURN(ModelWeights mine, ShardWeights(std::move(weights), 0, rc.tp_size));
    return ModelRunner::Create(backend_.get(), mine, rc);
  }();
  if (runner.ok()) runner_ = std::move(*runner);
  RETURN_IF_ERROR(AgreeTpStart(comm, runner.status()));
  runner_->OpenTpSession();
  if (const char* n = std::getenv("SATURN_TP_TEST_FAIL_STEP"); n != nullptr) {
    runner_->set_tp_test_fail_step(std::max(0LL, std::atoll(n)));  // test-only (model_runner.h)
  }
  std::cerr << absl::StrCat("saturn: tensor_parallel ", rc.tp_size, " over ", comm->transport(),
                            ": rank 0 holds ", runner_->weight_bytes() >> 20,
                            " MiB of weights (its share of the layers and of the LM head's "
                            "vocabulary; the embedding and norms whole) and ",
                            runner_->kv_cache_bytes() >> 20, " MiB of KV cache\n")
            << std::flush;
  return absl::OkStatus();
}

// What info() reports that never changes after Init.
void Engine::Impl::FillFixedInfo(int max_model_len, size_t kv_bytes_per_block,
                                 std::vector<int> graph_sizes) {
  EngineInfo& f = fixed_;
  f.model = runner_->model();
  f.limits = ModelLimits{f.model.vocab_size, max_model_len};
  f.max_num_seqs_limit = config_.max_num_seqs_limit;
  f.max_num_batched_tokens_limit = config_.max_num_batched_tokens_limit;
  f.max_queued_requests = config_.max_queued_requests;
  f.backend = backend_->name();
  f.device_name = backend_->device_name();
  f.compute_dtype = backend_->compute_dtype();
  f.weight_dtype = backend_->weight_dtype();
  f.device_memory_bytes = backend_->device_memory_bytes();
  f.supports_graphs = backend_->SupportsGraphs();
  f.per_op_timing_is_cheap = backend_->per_op_timing_is_cheap();
  f.weight_bytes = runner_->weight_bytes();
  f.tensor_parallel = config_.tensor_parallel;
  if (config_.tp_comm != nullptr && config_.tensor_parallel > 1) {
    f.tp_transport = config_.tp_comm->transport();
  }
  std::sort(graph_sizes.begin(), graph_sizes.end());
  f.graph_sizes = std::move(graph_sizes);
  f.kv.block_size = config_.block_size;
  f.kv.num_blocks = num_kv_blocks_;
  f.kv.bytes_per_block = kv_bytes_per_block;
  f.kv.dtype = backend_->kv_cache_dtype();
  f.kv.capacity_bytes = kv_bytes_per_block * static_cast<size_t>(num_kv_blocks_);
}

// One short generation through the whole path, so first-request costs (page faults, thread
// start-up, lazy library init) stay out of serving. It decodes on while the backend still
// settles a kernel setting on served steps (Backend::TuningOnServedSteps: the CPU backend's
// M = 1 weight-stream prefetch distance), so serving and calibration start on the settled one;
// at most kWarmupMaxTokens tokens. Its step records are dropped.
absl::Status Engine::Impl::Warmup() {
  constexpr int kPrompt = 8, kMinTokens = 2, kWarmupMaxTokens = 72;
  GenerateRequest req;
  const int vocab = runner_->model().vocab_size;
  for (int i = 0; i < kPrompt; ++i) req.prompt.push_back((i * 7 + 3) % vocab);
  const int room =
      std::min(scheduler_->config().max_model_len, num_kv_blocks_ * config_.block_size) - kPrompt;
  req.sampling.max_tokens = std::clamp(room, kMinTokens, kWarmupMaxTokens);
  req.sampling.ignore_eos = true;
  absl::Status failure;
  int generated = 0;
  // The event thread starts with the loop: until then events are delivered inside Step.
  live_[0].on_event = std::make_shared<const EventCallback>([&](const TokenEvent& ev) {
    generated += static_cast<int>(ev.token_ids.size());
    if (ev.final && ev.finish_reason == FinishReason::kError)
      failure = absl::InternalError(ev.error);
  });
  scheduler_->Add(0, req);
  while (scheduler_->HasWork() || in_flight_) {
    Step();
    if (generated >= kMinTokens && !backend_->TuningOnServedSteps() && scheduler_->Cancel(0)) {
      live_.erase(0);
      break;
    }
  }
  FinishInFlight();
  steps_.Clear();
  step_id_ = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    counters_ = EngineCounters{};  // the warm-up is no request: it must not skew the mix
    kv_free_ = scheduler_->blocks().num_free();  // a cancelled warm-up released its blocks here
  }
  if (!failure.ok()) {
    return absl::Status(failure.code(), absl::StrCat("warm-up failed: ", failure.message()));
  }
  return absl::OkStatus();
}

EngineInfo Engine::Impl::info() const {
  EngineInfo info = fixed_;
  std::lock_guard<std::mutex> lock(mu_);
  info.kv.blocks_free = kv_free_;
  info.graphs = graph_info_;
  return info;
}

EngineCounters Engine::Impl::counters() const {
  std::lock_guard<std::mutex> lock(mu_);
  EngineCounters c = counters_;
  c.num_waiting += static_cast<int>(incoming_.size());
  return c;
}

EngineOptions Engine::Impl::options() const {
  std::lock_guard<std::mutex> lock(mu_);
  return options_;
}

absl::StatusOr<EngineOptions> Engine::Impl::UpdateOptions(const EngineOptions& o) {
  RETURN_IF_ERROR(
      CheckEngineOptions(o, config_.max_num_seqs_limit, config_.max_num_batched_tokens_limit));
  if (o.num_speculative_tokens > 0 && fixed_.async_scheduling) {
    return absl::FailedPreconditionError(
        "num_speculative_tokens: speculation needs the plain step loop; start the server with "
        "--async_scheduling=off");
  }
  if (o.cuda_graphs && !fixed_.supports_graphs) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cuda_graphs: the ", fixed_.backend,
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

absl::Status Engine::Impl::RunBetweenSteps(std::function<absl::Status()> fn) {
  auto done = std::make_shared<std::promise<absl::Status>>();
  std::future<absl::Status> result = done->get_future();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return absl::UnavailableError("engine is shutting down");
    between_steps_.push_back([fn = std::move(fn), done](bool run) {
      done->set_value(run ? fn() : absl::UnavailableError("engine is shutting down"));
    });
    cv_.notify_one();
  }
  return result.get();
}

absl::StatusOr<StepProbe> Engine::Impl::ProbeSteps(StepProbeOptions options) {
  RETURN_IF_ERROR(options.Validate());
  options.max_batch = std::min(options.max_batch, config_.max_num_seqs_limit);
  options.max_prefill_tokens =
      std::min({options.max_prefill_tokens, config_.max_num_batched_tokens_limit,
                fixed_.limits.max_model_len * config_.max_num_seqs_limit});
  // As most serving steps run: timed per op where that is cheap (CPU), else not.
  options.per_op_timing = config_.instrument && fixed_.per_op_timing_is_cheap;
  absl::StatusOr<StepProbe> probe;
  RETURN_IF_ERROR(RunBetweenSteps([&] {
    probe = RunStepProbe(runner_.get(), scheduler_->mutable_blocks(),
                         scheduler_->config().max_model_len, options);
    return probe.status();
  }));
  std::lock_guard<std::mutex> lock(mu_);
  step_probe_ = step_probe_.has_value() ? MergeProbes(*step_probe_, *std::move(probe), options)
                                        : *std::move(probe);
  return *step_probe_;
}

absl::StatusOr<Calibration> Engine::Impl::Calibrate(const CalibrationOptions& options,
                                                    double* took_ms) {
  absl::StatusOr<Calibration> measured;
  double ms = 0;
  RETURN_IF_ERROR(RunBetweenSteps([&] {
    const double t0 = NowUs();
    measured = saturn::Calibrate(backend_.get(), options);
    // Under tensor parallelism, the group's all-reduce too (every rank takes part).
    if (measured.ok()) {
      if (absl::Status s = runner_->CalibrateAllReduce(&*measured); !s.ok()) measured = s;
    }
    ms = (NowUs() - t0) / 1000.0;
    return measured.status();
  }));
  if (took_ms != nullptr) *took_ms = ms;
  return measured;
}

std::optional<StepProbe> Engine::Impl::step_probe() const {
  std::lock_guard<std::mutex> lock(mu_);
  return step_probe_;
}

void Engine::Impl::Shutdown() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_ && !loop_.joinable()) return;
    stopping_ = true;
    cv_.notify_all();
    options_cv_.notify_all();
  }
  if (loop_.joinable()) loop_.join();
  events_.Stop();  // the final events of the requests the loop ended go out first
}

// ---- the facade ------------------------------------------------------------------------

absl::StatusOr<EngineOptions> Engine::UpdateOptions(const EngineOptions& options) {
  return impl_->UpdateOptions(options);
}
absl::StatusOr<Calibration> Engine::Calibrate(const CalibrationOptions& options, double* took_ms) {
  return impl_->Calibrate(options, took_ms);
}
absl::StatusOr<TpStats> Engine::TensorParallelStats(double begin_us, double end_us) const {
  if (impl_->config_.tensor_parallel <= 1) return TpStats{};
  absl::StatusOr<TpStats> stats;
  RETURN_IF_ERROR(impl_->RunBetweenSteps([&] {
    stats = impl_->runner_->CollectTpStats(begin_us, end_us);
    return stats.status();
  }));
  return stats;
}

absl::StatusOr<StepProbe> Engine::ProbeSteps(StepProbeOptions options) {
  return impl_->ProbeSteps(options);
}
void Engine::Shutdown() { impl_->Shutdown(); }
EngineInfo Engine::info() const { return impl_->info(); }
std::string Engine::KernelPlan() const { return impl_->KernelPlan(); }
double Engine::device_utilization() const { return impl_->backend_->DeviceUtilization(); }
EngineCounters Engine::counters() const { return impl_->counters(); }
EngineOptions Engine::options() const { return impl_->options(); }
const StepRing& Engine::steps() const { return impl_->steps_; }
std::optional<StepProbe> Engine::step_probe() const { return impl_->step_probe(); }
double Engine::step_in_flight_since_us() const { return impl_->step_in_flight_since_us_.load(); }

CalibrationOptions ModelCalibrationOptions(const Engine& engine) {
  CalibrationOptions o;
  o.model_m = std::clamp(engine.options().max_num_batched_tokens, 16, 512);
  const EngineInfo info = engine.info();
  o.model_k = info.model.hidden_size;
  o.model_n = info.model.intermediate_size;
  return o;
}

}  // namespace saturn
