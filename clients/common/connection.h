// The client's view of one or more Saturn servers: a shared channel that spreads Generate
// calls round-robin through gRPC's own load balancing, plus one channel per target for the
// calls that must reach every server (GetServerInfo, UpdateEngineOptions).
//
// Load balancing: with several --target values, the shared channel is created for the URI
// "ipv4:10.0.0.1:50051,10.0.0.2:50051" (or "ipv6:[..]:p,...") with the LB policy
// "round_robin", so gRPC keeps one subchannel per server and picks them in turn; host names
// are resolved once, at connect time. A single target is used as given (with round_robin,
// so a DNS name with several addresses spreads too).
// Connect() fails fast: each target must accept a connection and answer GetServerInfo
// within the connect timeout, else the error names the target.
// Every channel here is made with the tool's ChannelSecurity (TLS, client certificate,
// bearer token: clients/common/channel_security.h).
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "clients/common/channel_security.h"
#include "saturn/v1/saturn.grpc.pb.h"

namespace saturn::clients {

struct TargetInfo {
  std::string target;    // as given on the command line
  std::string resolved;  // ip:port used in the shared channel
  v1::ServerInfo info;   // at connect time
};

class Connection {
 public:
  // Thread-safety: Connect is a factory; the rest may be called from any thread.
  static absl::StatusOr<std::unique_ptr<Connection>> Connect(
      const std::vector<std::string>& targets, double timeout_s,
      std::shared_ptr<const ChannelSecurity> security = ChannelSecurity::Insecure());

  // The round-robin stub for Generate.
  v1::Saturn::Stub* stub() const { return stub_.get(); }
  const std::vector<TargetInfo>& targets() const { return targets_; }
  // A per-target stub (index into targets()).
  v1::Saturn::Stub* target_stub(size_t i) const { return target_stubs_[i].get(); }
  std::shared_ptr<grpc::Channel> target_channel(size_t i) const { return target_channels_[i]; }
  // The URI of the shared channel (for the report).
  const std::string& balanced_uri() const { return uri_; }

  // Sets the CUDA-graphs option on every target. FAILED_PRECONDITION (a backend without
  // graphs) comes back with the target and the server's reason.
  absl::Status SetCudaGraphs(bool on, double timeout_s) const;
  // Sends `req` to every target; the options the last one reports in force.
  absl::StatusOr<v1::EngineOptions> UpdateOptions(const v1::UpdateEngineOptionsRequest& req,
                                                  double timeout_s) const;
  // Current options of every target (GetServerInfo), refreshing targets()' infos is not done.
  absl::StatusOr<std::vector<v1::ServerInfo>> FetchInfos(double timeout_s) const;

 private:
  Connection() = default;
  std::vector<TargetInfo> targets_;
  std::shared_ptr<const ChannelSecurity> security_;
  std::string uri_;
  std::string balanced_name_;  // TLS name checked on the balanced channel ("": the default)
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Saturn::Stub> stub_;
  std::vector<std::shared_ptr<grpc::Channel>> target_channels_;
  std::vector<std::unique_ptr<v1::Saturn::Stub>> target_stubs_;
};

// "RESOURCE_EXHAUSTED" etc.
std::string GrpcCodeName(grpc::StatusCode code);

struct HostPort {
  std::string host;  // without the brackets of "[ipv6]:port"
  std::string port;
};
// "host:port" or "[ipv6]:port" split; the error names the target.
absl::StatusOr<HostPort> SplitHostPort(const std::string& target);
// OK for a target a connection can be tried on: host:port with a port in [1, 65535], or one of
// gRPC's schemes (unix:, dns:, ipv4:, ...) as given. Connect checks every target first.
absl::Status CheckTarget(const std::string& target);
// The one host all `targets` share (the TLS name of the balanced channel); different hosts are
// an error naming --tls_server_name.
absl::StatusOr<std::string> CommonHost(const std::vector<std::string>& targets);

// "host:port" -> "ip:port" (IPv6 as "[ip]:port") by getaddrinfo; the error names the target.
absl::StatusOr<std::string> ResolveTarget(const std::string& target);
// The balanced URI for resolved "ip:port" addresses (all IPv4 or all IPv6).
absl::StatusOr<std::string> BalancedUri(const std::vector<std::string>& resolved);

}  // namespace saturn::clients
