// ServerApp: the order of start-up and shutdown is the point of this file; see server_app.h.
#include "server/server_app.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <iostream>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "server/diag/diagnostics_service.h"
#include "server/diag/diagnostics_state.h"
#include "server/grpc/saturn_service.h"
#include "server/http/metrics_http.h"
#include "server/http/openai_http.h"
#include "server/listen_address.h"
#include "server/security.h"

namespace saturn {
namespace {

// Bounded waits after the grace period: a stream whose client stopped reading can only be
// ended by gRPC's own shutdown, which follows them.
constexpr absl::Duration kAbortWait = absl::Seconds(5);
constexpr absl::Duration kServerShutdownDeadline = absl::Seconds(2);

void Log(const std::string& line) { std::cerr << "saturn-server: " << line << std::endl; }

// host:port with the port replaced by the one bound.
std::string BoundAddress(const std::string& listen, int port) {
  if (listen.rfind("unix:", 0) == 0) return listen;
  return absl::StrCat(listen.substr(0, listen.rfind(':')), ":", port);
}

// The HTTP listeners (metrics, OpenAI API) bind the gRPC listen host (brackets of an IPv6
// literal removed).
std::string HttpHost(const std::string& listen) {
  if (listen.rfind("unix:", 0) == 0) return "127.0.0.1";
  std::string host = listen.substr(0, listen.rfind(':'));
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  return host;
}

}  // namespace

ServerApp::ServerApp(ServerConfig config)
    : config_(config),
      state_(std::move(config)),
      diag_(std::make_unique<DiagnosticsState>()),
      saturn_service_(std::make_unique<SaturnService>(&state_, diag_.get())) {
  AddService(std::make_unique<DiagnosticsService>(&state_, diag_.get()));
}

ServerApp::~ServerApp() { Shutdown(); }

int ServerApp::metrics_port() const { return metrics_ != nullptr ? metrics_->port() : 0; }

int ServerApp::http_port() const { return openai_ != nullptr ? openai_->port() : 0; }

void ServerApp::AddService(std::unique_ptr<grpc::Service> service) {
  extra_services_.push_back(std::move(service));
}

absl::Status ServerApp::StartListening() {
  if (server_ != nullptr) return absl::FailedPreconditionError("StartListening called twice");
  if (absl::Status s = config_.Validate(); !s.ok()) return s;
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();

  const bool is_unix = config_.listen.rfind("unix:", 0) == 0;
  // gRPC would unlink a live server's socket file and take the path over.
  if (absl::Status s = CheckUnixSocketFree(config_.listen); !s.ok()) return s;
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> creds = MakeServerCredentials(config_);
  if (!creds.ok()) return creds.status();
  const int socket_mode = ParseSocketMode(config_.unix_socket_mode).value_or(-1);

  grpc::ServerBuilder builder;
  int selected_port = 0;
  builder.AddListeningPort(config_.listen, *creds, &selected_port);
  // One server per address: with gRPC's default SO_REUSEPORT a second server on a busy port
  // would start and take half of the new connections.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.RegisterService(saturn_service_.get());
  for (auto& service : extra_services_) builder.RegisterService(service.get());
  // A unix socket has --unix_socket_mode from its creation on (the umask covers the bind;
  // chmod below sets the exact bits), not the process umask's.
  const mode_t old_umask = socket_mode >= 0 ? umask(~socket_mode & 0777) : 0;
  server_ = builder.BuildAndStart();
  if (socket_mode >= 0) umask(old_umask);
  if (server_ == nullptr || (selected_port == 0 && !is_unix)) {
    server_.reset();
    const std::string why = is_unix ? "" : TcpBindError(config_.listen);
    return absl::UnavailableError(absl::StrCat("--listen: cannot listen on ", config_.listen, ": ",
                                               why.empty() ? "see gRPC's error above" : why));
  }
  if (socket_mode >= 0 && chmod(config_.listen.substr(5).c_str(), socket_mode) != 0) {
    server_->Shutdown();
    server_.reset();
    return absl::UnavailableError(absl::StrCat(
        "--unix_socket_mode: cannot chmod ", config_.listen.substr(5), ": ", std::strerror(errno)));
  }
  for (const std::string& warning : SecurityWarnings(config_)) Log(warning);
  // The default health service starts out SERVING for "": turn it off until warm.
  SetServing(false);
  port_ = selected_port;
  state_.set_listen_address(BoundAddress(config_.listen, port_));
  Log(absl::StrCat("listening on ", address(), " (NOT_SERVING); loading model ",
                   config_.engine.model, " on backend ", config_.engine.backend));
  return absl::OkStatus();
}

absl::Status ServerApp::LoadEngine() {
  if (server_ == nullptr) return absl::FailedPreconditionError("LoadEngine before StartListening");
  if (engine_ != nullptr) return absl::FailedPreconditionError("LoadEngine called twice");
  // Before the weights: a tokenizer Saturn cannot read stops the start at once.
  absl::StatusOr<std::unique_ptr<TextTokenizer>> tokenizer =
      LoadTextTokenizer(config_.engine.model, config_.skip_tokenizer_init);
  if (!tokenizer.ok()) return tokenizer.status();
  tokenizer_ = std::move(*tokenizer);
  Log(tokenizer_ != nullptr ? absl::StrCat("text tokenizer: ", tokenizer_->Describe())
                            : absl::StrCat("no text tokenizer (",
                                           config_.skip_tokenizer_init ? "--skip_tokenizer_init"
                                           : absl::EndsWith(config_.engine.model, ".gguf")
                                               ? "the GGUF file holds no tokenizer.ggml.model"
                                               : "the checkpoint has no tokenizer.json",
                                           "): prompts are token ids only"));
  EngineConfig engine_config = config_.engine;
  engine_config.step_history_bytes = static_cast<size_t>(config_.step_history_mb) << 20;
  absl::StatusOr<std::unique_ptr<Engine>> engine = Engine::Create(engine_config);
  if (!engine.ok()) return engine.status();
  engine_ = std::move(*engine);
  if (absl::Status s = diag_->InitCalibration(engine_.get(), config_); !s.ok()) return s;
  diag_->StartSampling(engine_.get());
  const EngineInfo info = engine_->info();
  intake_ = std::make_unique<RequestIntake>(config_, info.limits, tokenizer_.get());
  state_.set_intake(intake_.get());
  state_.set_engine(engine_.get());
  const ModelConfig& m = info.model;
  const KvStats& kv = info.kv;
  if (tokenizer_ != nullptr && tokenizer_->id_limit() > m.vocab_size) {
    // As transformers would fail only on the text that reaches those ids, so does Saturn: each
    // such request is refused by name (prompt[i]: token id ... outside the vocabulary).
    Log(absl::StrCat("warning: the text tokenizer has ids up to ", tokenizer_->id_limit() - 1,
                     " but the model's vocab_size is ", m.vocab_size,
                     ": prompt_text that encodes to an id past it is refused"));
  }
  // The HTTP endpoints bind before the server says it is ready: a port in use stops the
  // start before any "ready" line.
  if (config_.metrics_port != 0) {
    metrics_ =
        std::make_unique<MetricsHttpServer>(&state_, diag_.get(), config_.metrics_window_seconds);
    if (absl::Status s = metrics_->Start(HttpHost(config_.listen), config_.metrics_port); !s.ok()) {
      return s;
    }
    Log(absl::StrCat("metrics at http://", HttpHost(config_.listen), ":", metrics_->port(),
                     "/metrics"));
  }
  if (config_.http_port != 0) {
    openai_ = std::make_unique<OpenAiHttpServer>(
        &state_, diag_.get(),
        config_.served_model_name.empty() ? config_.engine.model : config_.served_model_name);
    if (absl::Status s = openai_->Start(HttpHost(config_.listen), config_.http_port); !s.ok()) {
      return s;
    }
    Log(absl::StrCat("OpenAI-compatible API at http://", HttpHost(config_.listen), ":",
                     openai_->port(), "/v1 (Prometheus metrics at /metrics there too)"));
  }
  SetServing(true);
  Log(absl::StrCat("ready: model ", m.name, " (", m.NumParameters(), " parameters), backend ",
                   info.backend, ", device ", info.device_name, ", max_model_len ",
                   info.limits.max_model_len, ", KV ", kv.num_blocks, " blocks x ", kv.block_size,
                   " tokens, token events on ",
                   info.event_threads > 0 ? absl::StrCat(info.event_threads, " event thread(s)")
                                          : std::string("the engine thread"),
                   info.async_scheduling ? ", steps overlapped (async scheduling)" : "", ", on ",
                   address(), " (SERVING)"));
  return absl::OkStatus();
}

absl::Status ServerApp::Start() {
  if (absl::Status s = StartListening(); !s.ok()) return s;
  return LoadEngine();
}

void ServerApp::SetServing(bool serving) {
  grpc::HealthCheckServiceInterface* health = server_->GetHealthCheckService();
  if (health == nullptr) return;
  health->SetServingStatus("", serving);
  health->SetServingStatus(v1::Saturn::service_full_name(), serving);
  health->SetServingStatus(v1::Diagnostics::service_full_name(), serving);
}

void ServerApp::EndGracePeriod() { state_.EndGrace(); }

void ServerApp::Shutdown() {
  std::lock_guard<std::mutex> lock(shutdown_mu_);
  if (shut_down_ || server_ == nullptr) return;
  shut_down_ = true;

  if (metrics_ != nullptr) metrics_->Stop();
  SetServing(false);
  state_.StartDraining();  // new Generate calls: UNAVAILABLE
  const int in_flight = state_.active_calls();
  Log(absl::StrCat("shutting down: NOT_SERVING; ", in_flight, " call(s) in flight get ",
                   absl::FormatDuration(config_.shutdown_grace)));
  if (!state_.WaitIdleOrGraceEnd(absl::Now() + config_.shutdown_grace)) {
    Log(absl::StrCat(
        state_.grace_ended() ? "grace period cut short: ending " : "grace period over: ending ",
        state_.active_calls(), " call(s) with UNAVAILABLE"));
    state_.AbortAll();
    state_.WaitIdle(absl::Now() + kAbortWait);
  }
  // Every request still in the engine gets its final event here.
  if (engine_ != nullptr) engine_->Shutdown();
  diag_->StopSampling();
  server_->Shutdown(absl::ToChronoTime(absl::Now() + kServerShutdownDeadline));
  server_->Wait();
  if (openai_ != nullptr) openai_->Stop();
  if (!state_.WaitIdle(absl::Now() + kAbortWait)) {
    // A call still holds the engine; exiting without freeing it beats freeing it under it.
    Log("a call did not end; leaving the engine allocated");
    static_cast<void>(engine_.release());
  }
  state_.set_engine(nullptr);
  engine_.reset();
  Log("stopped");
}

}  // namespace saturn
