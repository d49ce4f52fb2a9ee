// MakeServerCredentials and the token gate (AuthGate, an AuthMetadataProcessor).
#include "server/security.h"

#include <grpc/grpc_security_constants.h>
#include <grpcpp/security/auth_metadata_processor.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "server/listen_address.h"

namespace saturn {
namespace {

class AuthGate final : public grpc::AuthMetadataProcessor {
 public:
  AuthGate(std::string token, std::string scope)
      : token_(std::move(token)), scope_(std::move(scope)) {}

  bool IsBlocking() const override { return false; }  // a string compare: run inline

  grpc::Status Process(const InputMetadata& metadata, grpc::AuthContext* /*context*/,
                       OutputMetadata* /*consumed*/, OutputMetadata* /*response*/) override {
    auto path = metadata.find(":path");
    const std::string_view method =
        path == metadata.end() ? std::string_view()
                               : std::string_view(path->second.data(), path->second.size());
    if (!MethodNeedsToken(method, scope_)) return grpc::Status::OK;
    auto auth = metadata.find("authorization");
    if (auth != metadata.end() &&
        BearerMatches(std::string_view(auth->second.data(), auth->second.size()), token_)) {
      return grpc::Status::OK;
    }
    return grpc::Status(
        grpc::StatusCode::UNAUTHENTICATED,
        absl::StrCat(std::string(method),
                     " needs the server's bearer token: send metadata \"authorization: "
                     "Bearer <token>\" (saturn-server --auth_token_file)"));
  }

 private:
  const std::string token_;
  const std::string scope_;
};

}  // namespace

const std::vector<std::string>& AdminMethods() {
  static const std::vector<std::string> kMethods = {
      "/saturn.v1.Saturn/UpdateEngineOptions",
      "/saturn.v1.Diagnostics/Recalibrate",
  };
  return kMethods;
}

bool BearerMatches(std::string_view header, std::string_view token) {
  constexpr std::string_view kPrefix = "Bearer ";
  if (header.size() != kPrefix.size() + token.size()) return false;
  if (!absl::StartsWithIgnoreCase(absl::string_view(header.data(), kPrefix.size()), "Bearer ")) {
    return false;
  }
  header.remove_prefix(kPrefix.size());
  unsigned char diff = 0;
  for (size_t i = 0; i < token.size(); ++i) diff |= header[i] ^ token[i];
  return diff == 0;
}

bool MethodNeedsToken(std::string_view method, std::string_view scope) {
  if (scope == "all") return true;
  for (const std::string& m : AdminMethods()) {
    if (method == m) return true;
  }
  return false;
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const ServerConfig& config) {
  std::shared_ptr<grpc::ServerCredentials> creds;
  if (!config.tls_cert.empty()) {
    absl::StatusOr<std::string> cert = ReadPemFile("--tls_cert", config.tls_cert);
    if (!cert.ok()) return cert.status();
    absl::StatusOr<std::string> key = ReadPemFile("--tls_key", config.tls_key);
    if (!key.ok()) return key.status();
    grpc::SslServerCredentialsOptions options;
    options.pem_key_cert_pairs.push_back({*key, *cert});
    if (!config.tls_client_ca.empty()) {
      absl::StatusOr<std::string> ca = ReadPemFile("--tls_client_ca", config.tls_client_ca);
      if (!ca.ok()) return ca.status();
      options.pem_root_certs = *ca;
      options.client_certificate_request =
          GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
    }
    creds = grpc::SslServerCredentials(options);
  } else if (!config.auth_token_file.empty()) {
    // The token gate needs secure credentials; local ones accept only this host's peers.
    creds = grpc::experimental::LocalServerCredentials(
        absl::StartsWith(config.listen, "unix:") ? UDS : LOCAL_TCP);
  } else {
    return grpc::InsecureServerCredentials();
  }
  if (!config.auth_token_file.empty()) {
    absl::StatusOr<std::string> token = ReadAuthToken(config.auth_token_file);
    if (!token.ok()) return token.status();
    creds->SetAuthMetadataProcessor(std::make_shared<AuthGate>(*token, config.auth_scope));
  }
  return creds;
}

std::vector<std::string> SecurityWarnings(const ServerConfig& config) {
  std::vector<std::string> out;
  if (IsLoopbackListen(config.listen)) return out;
  if (config.tls_cert.empty()) {
    out.push_back(absl::StrCat(
        "WARNING: listening on ", config.listen, " beyond loopback without TLS: requests, replies",
        config.metrics_port != 0 ? ", metrics" : "",
        " and any token travel in plaintext (set --tls_cert and --tls_key)"));
  }
  if (config.auth_token_file.empty()) {
    out.push_back(absl::StrCat(
        "WARNING: listening on ", config.listen,
        " beyond loopback without --auth_token_file: anyone who can reach it may call the admin "
        "methods (UpdateEngineOptions, Recalibrate)"));
  }
  return out;
}

}  // namespace saturn
