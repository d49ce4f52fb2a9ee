// How the client tools reach a server started with --tls_cert / --tls_client_ca /
// --auth_token_file (docs/SECURITY.md): the flags, in the style of grpcurl and of
// saturn-server's own,
//   --tls_ca=PEM             trust roots for the server's certificate; setting it turns TLS on
//   --tls_cert, --tls_key    a client certificate and its key (mutual TLS); both or neither
//   --tls_server_name=NAME   the name checked in the server's certificate (default: the host
//                            of --target)
//   --auth_token_file=PATH   sends "authorization: Bearer <token>" on every call
// and the credentials and channel options they become. Every channel a tool opens is made by
// ChannelSecurity::CreateChannel (clients/common/connection.cc), so no call can go out without
// them. The token is added by a client interceptor, so it rides on every RPC of the channel
// (Saturn, Diagnostics, health), streams included.
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace saturn::clients {

struct ChannelSecurityFlags {
  std::string tls_ca;
  std::string tls_cert;
  std::string tls_key;
  std::string tls_server_name;
  std::string auth_token_file;

  bool tls() const { return !tls_ca.empty(); }
  // Flag combinations only (files are read by ChannelSecurity::Load); names the flag.
  absl::Status Validate() const;
};

// The loaded credentials. Thread-safety: immutable after Load; CreateChannel from any thread.
class ChannelSecurity {
 public:
  // Validates `flags` and reads their files; errors (INVALID_ARGUMENT) name the flag.
  static absl::StatusOr<std::shared_ptr<const ChannelSecurity>> Load(
      const ChannelSecurityFlags& flags);
  // Plaintext, no token: what the tools did before these flags existed.
  static std::shared_ptr<const ChannelSecurity> Insecure();

  // A channel to `target` with these credentials (and the token interceptor) on `args`.
  // With TLS the name checked in the certificate is --tls_server_name, else `tls_name`, else
  // the host of `target`.
  std::shared_ptr<grpc::Channel> CreateChannel(const std::string& target,
                                               grpc::ChannelArguments args,
                                               const std::string& tls_name = "") const;
  bool tls() const { return tls_; }
  bool has_token() const { return !token_.empty(); }
  bool has_server_name() const { return !server_name_.empty(); }
  // What to check when a connection fails: names the flags that matter for this setup.
  std::string ConnectHint() const;

 private:
  ChannelSecurity() = default;
  bool tls_ = false;
  bool client_cert_ = false;
  grpc::SslCredentialsOptions ssl_;
  std::string server_name_;
  std::string token_;
};

}  // namespace saturn::clients
