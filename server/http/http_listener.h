// The HTTP listeners' shared part (the metrics endpoint and the OpenAI-compatible API): a
// cpp-httplib server with the gRPC port's security (server/security.h, docs/SECURITY.md),
// bound with an error that names the flag, serving on its own thread. Only the .cc files of
// those listeners include <httplib.h>; this header forward-declares what it needs.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "server/server_config.h"

namespace httplib {
class Server;
struct Response;
}  // namespace httplib

namespace saturn {

class HttpListener {
 public:
  HttpListener() = default;
  ~HttpListener();  // Stop()
  HttpListener(const HttpListener&) = delete;
  HttpListener& operator=(const HttpListener&) = delete;

  // Makes the server: HTTPS with --tls_cert/--tls_key (and client certificates signed by
  // --tls_client_ca), and, under --auth_scope=all, the bearer token on every route;
  // `unauthorized` writes a refused request's body (status 401 and WWW-Authenticate are set
  // before it runs). `what` names the listener in errors.
  absl::Status Init(const ServerConfig& config, const std::string& what,
                    std::function<void(httplib::Response&)> unauthorized);
  // The server, for routes and settings between Init and Listen.
  httplib::Server& server() { return *http_; }
  // Binds host:port (port -1: any free port; the error names `flag`) and serves on a thread.
  absl::Status Listen(const std::string& host, int port, const std::string& flag);
  // Stops serving and joins its threads. Idempotent.
  void Stop();
  bool initialized() const { return http_ != nullptr; }
  int port() const { return port_; }

 private:
  std::unique_ptr<httplib::Server> http_;
  std::thread thread_;
  std::atomic<bool> listen_returned_{false};  // set by thread_ when httplib's loop ends
  int port_ = 0;
  int socket_ = -1;  // the listening socket (set while binding)
};

// One of the server's HTTP endpoints (MetricsHttpServer, OpenAiHttpServer): Start registers
// its routes on its listener and serves. Each derived destructor calls Stop() first, before
// the members its routes use are gone.
class HttpEndpoint {
 public:
  HttpEndpoint() = default;
  virtual ~HttpEndpoint() = default;
  HttpEndpoint(const HttpEndpoint&) = delete;
  HttpEndpoint& operator=(const HttpEndpoint&) = delete;

  // Binds host:port (port -1: any free port) and serves on a background thread.
  virtual absl::Status Start(const std::string& host, int port) = 0;
  // Stops serving and joins its threads. Idempotent.
  void Stop() { listener_.Stop(); }
  int port() const { return listener_.port(); }

 protected:
  HttpListener listener_;
};

}  // namespace saturn
