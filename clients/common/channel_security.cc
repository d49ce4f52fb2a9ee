// ChannelSecurity (channel_security.h): SSL channel credentials from the PEM files, and a
// client interceptor that adds the bearer token to each call's initial metadata.
#include "clients/common/channel_security.h"

#include <grpcpp/support/client_interceptor.h>

#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/base/credential_files.h"

namespace saturn::clients {
namespace {

// Adds "authorization: Bearer <token>" before the initial metadata of every call leaves.
class BearerInterceptor final : public grpc::experimental::Interceptor {
 public:
  explicit BearerInterceptor(const std::string* header) : header_(header) {}

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::PRE_SEND_INITIAL_METADATA)) {
      methods->GetSendInitialMetadata()->insert({"authorization", *header_});
    }
    methods->Proceed();
  }

 private:
  const std::string* header_;
};

class BearerInterceptorFactory final
    : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  explicit BearerInterceptorFactory(const std::string& token)
      : header_(absl::StrCat("Bearer ", token)) {}

  grpc::experimental::Interceptor* CreateClientInterceptor(
      grpc::experimental::ClientRpcInfo* /*info*/) override {
    return new BearerInterceptor(&header_);
  }

 private:
  const std::string header_;  // lives as long as the channel that owns this factory
};

}  // namespace

absl::Status ChannelSecurityFlags::Validate() const {
  if (tls_cert.empty() != tls_key.empty()) {
    return absl::InvalidArgumentError(
        tls_key.empty() ? "--tls_key: --tls_cert needs its private key (--tls_key=PEM)"
                        : "--tls_cert: --tls_key needs its certificate (--tls_cert=PEM)");
  }
  const char* needs_ca = !tls_cert.empty()          ? "--tls_cert"
                         : !tls_server_name.empty() ? "--tls_server_name"
                                                    : nullptr;
  if (!tls() && needs_ca != nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        needs_ca,
        ": needs --tls_ca=PEM (the CA that signed the server's certificate; it turns TLS on)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<const ChannelSecurity>> ChannelSecurity::Load(
    const ChannelSecurityFlags& flags) {
  if (absl::Status s = flags.Validate(); !s.ok()) return s;
  std::shared_ptr<ChannelSecurity> c(new ChannelSecurity());
  if (flags.tls()) {
    absl::StatusOr<std::string> ca = ReadPemFile("--tls_ca", flags.tls_ca);
    if (!ca.ok()) return ca.status();
    c->ssl_.pem_root_certs = *std::move(ca);
    if (!flags.tls_cert.empty()) {
      absl::StatusOr<std::string> cert = ReadPemFile("--tls_cert", flags.tls_cert);
      if (!cert.ok()) return cert.status();
      absl::StatusOr<std::string> key = ReadPemFile("--tls_key", flags.tls_key);
      if (!key.ok()) return key.status();
      c->ssl_.pem_cert_chain = *std::move(cert);
      c->ssl_.pem_private_key = *std::move(key);
      c->client_cert_ = true;
    }
    c->tls_ = true;
    c->server_name_ = flags.tls_server_name;
  }
  if (!flags.auth_token_file.empty()) {
    absl::StatusOr<std::string> token = ReadAuthToken(flags.auth_token_file);
    if (!token.ok()) return token.status();
    c->token_ = *std::move(token);
  }
  return std::shared_ptr<const ChannelSecurity>(std::move(c));
}

std::shared_ptr<const ChannelSecurity> ChannelSecurity::Insecure() {
  return std::shared_ptr<const ChannelSecurity>(new ChannelSecurity());
}

std::shared_ptr<grpc::Channel> ChannelSecurity::CreateChannel(const std::string& target,
                                                              grpc::ChannelArguments args,
                                                              const std::string& tls_name) const {
  const std::string& name = !server_name_.empty() ? server_name_ : tls_name;
  if (tls_ && !name.empty()) args.SetSslTargetNameOverride(name);
  std::shared_ptr<grpc::ChannelCredentials> creds =
      tls_ ? grpc::SslCredentials(ssl_) : grpc::InsecureChannelCredentials();
  if (token_.empty()) return grpc::CreateCustomChannel(target, creds, args);
  std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>> factories;
  factories.push_back(std::make_unique<BearerInterceptorFactory>(token_));
  return grpc::experimental::CreateCustomChannelWithInterceptors(target, creds, args,
                                                                 std::move(factories));
}

std::string ChannelSecurity::ConnectHint() const {
  if (!tls_) {
    return "is saturn-server running there? if it serves TLS (--tls_cert), pass --tls_ca";
  }
  return absl::StrCat(
      "is saturn-server running there with TLS? check that --tls_ca signed its certificate and "
      "that the certificate names the host (or --tls_server_name)",
      client_cert_ ? ""
                   : "; if it requires client certificates (--tls_client_ca), pass "
                     "--tls_cert and --tls_key");
}

}  // namespace saturn::clients
