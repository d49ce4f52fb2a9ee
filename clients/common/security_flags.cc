// The client tools' security flags (security_flags.h).
#include "clients/common/security_flags.h"

#include <string>

#include "absl/flags/flag.h"

ABSL_FLAG(std::string, tls_ca, "",
          "PEM file of the CA(s) that signed the server's certificate; setting it turns TLS on");
ABSL_FLAG(std::string, tls_cert, "",
          "PEM client certificate for mutual TLS (server --tls_client_ca); needs --tls_key");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls_cert");
ABSL_FLAG(std::string, tls_server_name, "",
          "Name to check in the server's certificate (default: the host of --target)");
ABSL_FLAG(std::string, auth_token_file, "",
          "File with the server's bearer token, sent as \"authorization: Bearer <token>\" on "
          "every call");

namespace saturn::clients {

ChannelSecurityFlags SecurityFlagsFromCommandLine() {
  ChannelSecurityFlags f;
  f.tls_ca = absl::GetFlag(FLAGS_tls_ca);
  f.tls_cert = absl::GetFlag(FLAGS_tls_cert);
  f.tls_key = absl::GetFlag(FLAGS_tls_key);
  f.tls_server_name = absl::GetFlag(FLAGS_tls_server_name);
  f.auth_token_file = absl::GetFlag(FLAGS_auth_token_file);
  return f;
}

}  // namespace saturn::clients
