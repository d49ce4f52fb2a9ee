// ServerApp: assembles and runs the gRPC server around one engine.
//
//   StartListening(): gRPC up (Saturn, health NOT_SERVING, reflection, extra services);
//                     Saturn calls answer UNAVAILABLE "model is loading"
//   LoadEngine():     Engine::Create (load, warm up) -> calibration (measured on the engine
//                     thread by Engine::Calibrate, or loaded) -> health SERVING -> metrics
//                     endpoint (--metrics_port) -> OpenAI-compatible API (--http_port)
//   Shutdown():       metrics endpoint stopped, health NOT_SERVING, refuse new calls,
//                     in-flight streams get shutdown_grace, then the rest are cancelled in the
//                     engine and end with UNAVAILABLE; Engine::Shutdown; gRPC server shut
//                     down; HTTP API stopped (new requests got 503 since the drain began);
//                     engine freed
//
// The Diagnostics service (server/diag/diagnostics_service.h) is registered by the constructor.
// Another service is one AddService() line before StartListening; it can
// reach the engine through state() (engine() is null until LoadEngine returns).
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "engine/engine.h"
#include "engine/tokenizer/text_tokenizer.h"
#include "server/server_config.h"
#include "server/serving_state.h"

namespace saturn {

class SaturnService;
class DiagnosticsState;
class MetricsHttpServer;
class OpenAiHttpServer;

class ServerApp {
 public:
  explicit ServerApp(ServerConfig config);
  ~ServerApp();  // Shutdown()
  ServerApp(const ServerApp&) = delete;
  ServerApp& operator=(const ServerApp&) = delete;

  // Registers an extra service; call before StartListening. Kept alive until the server is
  // gone.
  void AddService(std::unique_ptr<grpc::Service> service);
  ServingState* state() { return &state_; }

  // Validates the config, binds and starts gRPC. Health reports NOT_SERVING.
  absl::Status StartListening();
  // Creates and warms the engine, then reports SERVING. Call once, after StartListening.
  absl::Status LoadEngine();
  // StartListening + LoadEngine.
  absl::Status Start();

  // Graceful shutdown (see the header comment). Idempotent; thread-safe; blocks up to about
  // shutdown_grace plus a few seconds.
  void Shutdown();
  // Ends the grace period of a Shutdown in progress (or the next one) now: the calls still
  // in flight end with UNAVAILABLE at once. Thread-safe; does not block (a second SIGINT or
  // SIGTERM).
  void EndGracePeriod();

  // The port bound (the real one when the config asked for port 0); 0 before listening.
  int port() const { return port_; }
  // host:port with the real port.
  std::string address() const { return state_.listen_address(); }
  // Null until LoadEngine succeeded.
  Engine* engine() const { return engine_.get(); }
  grpc::Server* grpc_server() const { return server_.get(); }
  // Calibration, plan tracking and request metrics (always present).
  DiagnosticsState* diagnostics() const { return diag_.get(); }
  // The metrics endpoint's port once LoadEngine started it; 0 when off.
  int metrics_port() const;
  // The OpenAI-compatible API's port once LoadEngine started it; 0 when off.
  int http_port() const;

 private:
  void SetServing(bool serving);

  ServerConfig config_;
  ServingState state_;
  std::unique_ptr<DiagnosticsState> diag_;  // before the services, which use it
  std::unique_ptr<SaturnService> saturn_service_;
  std::vector<std::unique_ptr<grpc::Service>> extra_services_;
  std::unique_ptr<TextTokenizer> tokenizer_;  // null: token ids only; outlives every call
  std::unique_ptr<RequestIntake> intake_;     // once the model has loaded; outlives every call
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<MetricsHttpServer> metrics_;
  std::unique_ptr<OpenAiHttpServer> openai_;
  int port_ = 0;
  std::mutex shutdown_mu_;
  bool shut_down_ = false;
};

}  // namespace saturn
