// Channels to the targets (see connection.h): resolve, connect with a deadline, read each
// server's info, and build the round-robin channel for the load itself.
#include "clients/common/connection.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>

#include <chrono>
#include <thread>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace saturn::clients {
namespace {

std::chrono::system_clock::time_point In(double s) {
  return std::chrono::system_clock::now() +
         std::chrono::microseconds(static_cast<int64_t>(s * 1e6));
}

std::shared_ptr<grpc::Channel> MakeChannel(const ChannelSecurity& security, const std::string& uri,
                                           const std::string& tls_name = "") {
  grpc::ChannelArguments args;
  args.SetLoadBalancingPolicyName("round_robin");
  // Large sweeps open hundreds of streams; let messages of long prompts through.
  args.SetMaxReceiveMessageSize(256 << 20);  // saturn-diag record: ~0.43 kB a step
  args.SetMaxSendMessageSize(64 << 20);
  return security.CreateChannel(uri, args, tls_name);
}

}  // namespace

std::string GrpcCodeName(grpc::StatusCode code) {
  static const char* kNames[] = {"OK",
                                 "CANCELLED",
                                 "UNKNOWN",
                                 "INVALID_ARGUMENT",
                                 "DEADLINE_EXCEEDED",
                                 "NOT_FOUND",
                                 "ALREADY_EXISTS",
                                 "PERMISSION_DENIED",
                                 "RESOURCE_EXHAUSTED",
                                 "FAILED_PRECONDITION",
                                 "ABORTED",
                                 "OUT_OF_RANGE",
                                 "UNIMPLEMENTED",
                                 "INTERNAL",
                                 "UNAVAILABLE",
                                 "DATA_LOSS",
                                 "UNAUTHENTICATED"};
  const int c = static_cast<int>(code);
  return c >= 0 && c < 17 ? kNames[c] : absl::StrCat("CODE_", c);
}

namespace {

absl::Status FromGrpc(const grpc::Status& s, const std::string& context) {
  return absl::Status(
      static_cast<absl::StatusCode>(s.error_code()),
      absl::StrCat(context, ": ", GrpcCodeName(s.error_code()), ": ", s.error_message()));
}

// GetServerInfo, retried while the server answers UNAVAILABLE (still loading its model).
absl::StatusOr<v1::ServerInfo> InfoWhenReady(v1::Saturn::Stub* stub, const std::string& target,
                                             std::chrono::system_clock::time_point deadline) {
  while (true) {
    grpc::ClientContext ctx;
    ctx.set_deadline(deadline);
    v1::ServerInfo info;
    grpc::Status s = stub->GetServerInfo(&ctx, v1::GetServerInfoRequest(), &info);
    if (s.ok()) return info;
    if (s.error_code() != grpc::StatusCode::UNAVAILABLE ||
        std::chrono::system_clock::now() + std::chrono::milliseconds(200) > deadline) {
      return FromGrpc(s, absl::StrCat("--target ", target, ": GetServerInfo failed"));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
}

}  // namespace

absl::StatusOr<HostPort> SplitHostPort(const std::string& target) {
  std::string host, port;
  if (absl::StartsWith(target, "[")) {
    const size_t close = target.find("]:");
    if (close == std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("--target ", target, ": expected [ipv6]:port"));
    }
    host = target.substr(1, close - 1);
    port = target.substr(close + 2);
  } else {
    const size_t colon = target.rfind(':');
    if (colon == std::string::npos || colon == 0 || colon + 1 == target.size()) {
      return absl::InvalidArgumentError(absl::StrCat("--target ", target, ": expected host:port"));
    }
    host = target.substr(0, colon);
    port = target.substr(colon + 1);
  }
  return HostPort{host, port};
}

// A target gRPC would wait on for the whole --timeout when it can never connect: host:port
// with a port outside [1, 65535] (0, 65536, -1, none). gRPC's own schemes pass as given.
absl::Status CheckTarget(const std::string& target) {
  for (const char* scheme : {"unix:", "unix-abstract:", "dns:", "ipv4:", "ipv6:", "vsock:"}) {
    if (absl::StartsWith(target, scheme)) return absl::OkStatus();
  }
  absl::StatusOr<HostPort> split = SplitHostPort(target);
  if (!split.ok()) return split.status();
  int port = 0;
  if (!absl::SimpleAtoi(split->port, &port) || port < 1 || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("--target ", target, ": port \"", split->port,
                                                   "\" is not a number in [1, 65535]"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ResolveTarget(const std::string& target) {
  absl::StatusOr<HostPort> split = SplitHostPort(target);
  if (!split.ok()) return split.status();
  const std::string& host = split->host;
  const std::string& port = split->port;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &res);
  if (rc != 0 || res == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("--target ", target, ": cannot resolve host \"",
                                                   host, "\": ", gai_strerror(rc)));
  }
  // Prefer IPv4 so that mixed lists still share one scheme.
  const addrinfo* pick = res;
  for (const addrinfo* a = res; a != nullptr; a = a->ai_next) {
    if (a->ai_family == AF_INET) {
      pick = a;
      break;
    }
  }
  char buf[INET6_ADDRSTRLEN] = {};
  std::string out;
  if (pick->ai_family == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(pick->ai_addr)->sin_addr, buf, sizeof buf);
    out = absl::StrCat(buf, ":", port);
  } else {
    inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(pick->ai_addr)->sin6_addr, buf,
              sizeof buf);
    out = absl::StrCat("[", buf, "]:", port);
  }
  freeaddrinfo(res);
  return out;
}

absl::StatusOr<std::string> CommonHost(const std::vector<std::string>& targets) {
  std::string host;
  for (const std::string& t : targets) {
    absl::StatusOr<HostPort> split = SplitHostPort(t);
    if (!split.ok()) return split.status();
    if (!host.empty() && split->host != host) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--tls_server_name: the --target hosts differ (", host, ", ", split->host,
          ") but TLS checks one name on the balanced channel: give the name every replica's "
          "certificate carries"));
    }
    host = split->host;
  }
  return host;
}

absl::StatusOr<std::string> BalancedUri(const std::vector<std::string>& resolved) {
  bool v6 = false, v4 = false;
  for (const std::string& r : resolved) (absl::StartsWith(r, "[") ? v6 : v4) = true;
  if (v4 && v6) {
    return absl::InvalidArgumentError(
        "--target: several targets must all be IPv4 or all IPv6 (gRPC's ipv4:/ipv6: resolvers "
        "take one family)");
  }
  return absl::StrCat(v6 ? "ipv6:" : "ipv4:", absl::StrJoin(resolved, ","));
}

absl::StatusOr<std::unique_ptr<Connection>> Connection::Connect(
    const std::vector<std::string>& targets, double timeout_s,
    std::shared_ptr<const ChannelSecurity> security) {
  if (targets.empty()) return absl::InvalidArgumentError("--target: at least one is needed");
  std::unique_ptr<Connection> c(new Connection());
  c->security_ = std::move(security);
  const auto deadline = In(timeout_s);
  std::vector<std::string> resolved;
  for (const std::string& t : targets) {
    if (absl::Status s = CheckTarget(t); !s.ok()) return s;
  }
  for (const std::string& t : targets) {
    TargetInfo ti;
    ti.target = t;
    if (targets.size() > 1) {
      absl::StatusOr<std::string> r = ResolveTarget(t);
      if (!r.ok()) return r.status();
      ti.resolved = *r;
      resolved.push_back(*r);
    } else {
      ti.resolved = t;
    }
    // A resolved address is dialled, but the certificate names the host as given.
    std::string tls_name;
    if (targets.size() > 1) tls_name = SplitHostPort(t)->host;  // ResolveTarget checked it
    std::shared_ptr<grpc::Channel> ch = MakeChannel(*c->security_, ti.resolved, tls_name);
    if (!ch->WaitForConnected(deadline)) {
      return absl::UnavailableError(absl::StrCat("--target ", t, ": cannot connect within ",
                                                 timeout_s, " s (", c->security_->ConnectHint(),
                                                 ")"));
    }
    c->target_stubs_.push_back(v1::Saturn::NewStub(ch));
    absl::StatusOr<v1::ServerInfo> info = InfoWhenReady(c->target_stubs_.back().get(), t, deadline);
    if (!info.ok()) return info.status();
    ti.info = *std::move(info);
    c->target_channels_.push_back(std::move(ch));
    c->targets_.push_back(std::move(ti));
  }
  if (targets.size() > 1) {
    absl::StatusOr<std::string> uri = BalancedUri(resolved);
    if (!uri.ok()) return uri.status();
    c->uri_ = *uri;
    // TLS checks one name per channel, and the balanced channel's default one is the whole
    // address list: use the targets' common host, unless --tls_server_name names it.
    if (c->security_->tls() && !c->security_->has_server_name()) {
      absl::StatusOr<std::string> name = CommonHost(targets);
      if (!name.ok()) return name.status();
      c->balanced_name_ = *name;
    }
  } else {
    c->uri_ = targets[0];
  }
  c->channel_ = MakeChannel(*c->security_, c->uri_, c->balanced_name_);
  if (!c->channel_->WaitForConnected(deadline)) {
    return absl::UnavailableError(absl::StrCat("cannot connect the balanced channel ", c->uri_,
                                               " within ", timeout_s, " s (",
                                               c->security_->ConnectHint(), ")"));
  }
  c->stub_ = v1::Saturn::NewStub(c->channel_);
  return c;
}

absl::Status Connection::SetCudaGraphs(bool on, double timeout_s) const {
  for (size_t i = 0; i < targets_.size(); ++i) {
    grpc::ClientContext ctx;
    ctx.set_deadline(In(timeout_s));
    v1::UpdateEngineOptionsRequest req;
    req.set_cuda_graphs(on);
    v1::UpdateEngineOptionsResponse resp;
    grpc::Status s = target_stubs_[i]->UpdateEngineOptions(&ctx, req, &resp);
    if (!s.ok()) {
      return FromGrpc(s, absl::StrCat("--target ", targets_[i].target, ": cannot turn CUDA graphs ",
                                      on ? "on" : "off"));
    }
    if (resp.options().cuda_graphs() != on) {
      return absl::FailedPreconditionError(absl::StrCat(
          "--target ", targets_[i].target, ": asked for cuda_graphs=", on ? "true" : "false",
          " but the server reports ", resp.options().cuda_graphs() ? "true" : "false"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<v1::EngineOptions> Connection::UpdateOptions(
    const v1::UpdateEngineOptionsRequest& req, double timeout_s) const {
  v1::EngineOptions now;
  for (size_t i = 0; i < targets_.size(); ++i) {
    grpc::ClientContext ctx;
    ctx.set_deadline(In(timeout_s));
    v1::UpdateEngineOptionsResponse resp;
    grpc::Status s = target_stubs_[i]->UpdateEngineOptions(&ctx, req, &resp);
    if (!s.ok()) return FromGrpc(s, absl::StrCat("--target ", targets_[i].target));
    now = resp.options();
  }
  return now;
}

absl::StatusOr<std::vector<v1::ServerInfo>> Connection::FetchInfos(double timeout_s) const {
  std::vector<v1::ServerInfo> out;
  for (size_t i = 0; i < targets_.size(); ++i) {
    grpc::ClientContext ctx;
    ctx.set_deadline(In(timeout_s));
    v1::ServerInfo info;
    grpc::Status s = target_stubs_[i]->GetServerInfo(&ctx, v1::GetServerInfoRequest(), &info);
    if (!s.ok()) return FromGrpc(s, absl::StrCat("--target ", targets_[i].target));
    out.push_back(std::move(info));
  }
  return out;
}

}  // namespace saturn::clients
