// Transport security and access control for saturn-server (docs/SECURITY.md):
//   --tls_cert/--tls_key        TLS on the gRPC port (and the metrics endpoint)
//   --tls_client_ca             mutual TLS: clients must present a certificate signed by it
//   --auth_token_file           a bearer token ("authorization: Bearer <token>" metadata)
//                               required for the admin methods (AdminMethods())
//   --auth_scope=all            ... and for every RPC (health and reflection included) and
//                               GET /metrics
// The token is checked by a grpc::AuthMetadataProcessor on the method's path, before any
// handler runs, so it covers every service, present and future, with no code in handlers.
// gRPC runs such a processor only behind secure credentials: with a token but no TLS the
// server uses gRPC's local credentials (loopback TCP or unix socket peers only, no
// handshake, so plaintext clients connect as before); a token without TLS on a non-loopback
// address is refused by ServerConfig::Validate.
#pragma once

#include <grpcpp/security/server_credentials.h>

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/base/credential_files.h"  // ReadAuthToken, ReadPemFile
#include "server/server_config.h"

namespace saturn {

// The methods that change the server (full gRPC paths): the token is required for these
// whenever --auth_token_file is set. The single list; add an admin RPC here.
const std::vector<std::string>& AdminMethods();

// Whether an "authorization" header value carries `token` ("Bearer <token>"), compared in
// constant time.
bool BearerMatches(std::string_view header, std::string_view token);

// Whether a call to `method` (full path) needs the token under `scope` ("admin" | "all").
bool MethodNeedsToken(std::string_view method, std::string_view scope);

// The gRPC credentials `config` asks for (TLS, token gate, local or insecure). Reads the PEM
// and token files; errors name the flag.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const ServerConfig& config);

// The warnings to log at start: listening beyond loopback without TLS, or without a token.
std::vector<std::string> SecurityWarnings(const ServerConfig& config);

}  // namespace saturn
