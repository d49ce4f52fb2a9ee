// HttpListener over cpp-httplib (Debian libcpp-httplib-dev, built with OpenSSL).
#include "server/http/http_listener.h"

#include <httplib.h>
#include <sys/socket.h>

#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "server/security.h"

namespace saturn {

HttpListener::~HttpListener() { Stop(); }

absl::Status HttpListener::Init(const ServerConfig& config, const std::string& what,
                                std::function<void(httplib::Response&)> unauthorized) {
  if (http_ != nullptr) return absl::FailedPreconditionError(absl::StrCat(what, " started twice"));
  std::unique_ptr<httplib::Server> http;
  if (!config.tls_cert.empty()) {
    auto https = std::make_unique<httplib::SSLServer>(
        config.tls_cert.c_str(), config.tls_key.c_str(),
        config.tls_client_ca.empty() ? nullptr : config.tls_client_ca.c_str());
    if (!https->is_valid()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--tls_cert, --tls_key: ", what,
                       " cannot load them (PEM certificate and matching key expected)"));
    }
    http = std::move(https);
  } else {
    http = std::make_unique<httplib::Server>();
  }
  if (config.auth_scope == "all") {
    absl::StatusOr<std::string> token = ReadAuthToken(config.auth_token_file);
    if (!token.ok()) return token.status();
    http->set_pre_routing_handler([token = *token, unauthorized = std::move(unauthorized)](
                                      const httplib::Request& req, httplib::Response& res) {
      if (BearerMatches(req.get_header_value("Authorization"), token)) {
        return httplib::Server::HandlerResponse::Unhandled;
      }
      res.status = 401;
      res.set_header("WWW-Authenticate", "Bearer");
      unauthorized(res);
      return httplib::Server::HandlerResponse::Handled;
    });
  }
  // httplib's default also sets SO_REUSEPORT, with which a second server bound a port the
  // first still served and the kernel split the connections between them; as with gRPC
  // (server_app.cc), one server per address: only SO_REUSEADDR (restart past TIME_WAIT).
  http->set_socket_options([this](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    socket_ = sock;  // the listening socket, for its backlog (Listen)
  });
  http_ = std::move(http);
  return absl::OkStatus();
}

absl::Status HttpListener::Listen(const std::string& host, int port, const std::string& flag) {
  const int bound =
      port < 0 ? http_->bind_to_any_port(host) : (http_->bind_to_port(host, port) ? port : -1);
  if (bound <= 0) {
    http_.reset();
    return absl::UnavailableError(
        absl::StrFormat("%s: cannot listen on %s:%d (address in use?)", flag, host, port));
  }
  port_ = bound;
  // Debian's libcpp-httplib listens with a backlog of 5 (CPPHTTPLIB_LISTEN_BACKLOG, fixed when
  // the library was built): 40 clients connecting at once overflowed it, and the connections
  // the kernel dropped ended "Read" errors a second later on the client's side. Listening again
  // on the bound socket widens it to the system's limit (somaxconn), as nginx and gRPC do.
  int accepting = 0;
  socklen_t len = sizeof(accepting);
  if (socket_ >= 0 && getsockopt(socket_, SOL_SOCKET, SO_ACCEPTCONN, &accepting, &len) == 0 &&
      accepting != 0) {
    ::listen(socket_, SOMAXCONN);
  }
  listen_returned_ = false;
  thread_ = std::thread([this] {
    http_->listen_after_bind();
    listen_returned_ = true;
  });
  // httplib's stop() does nothing until its loop has started (is_running): a Stop() right
  // after Listen (a later start step failing) left the loop running and joined it forever.
  while (!http_->is_running() && !listen_returned_) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return absl::OkStatus();
}

void HttpListener::Stop() {
  if (http_ == nullptr) return;
  http_->stop();
  if (thread_.joinable()) thread_.join();
  http_.reset();
}

}  // namespace saturn
