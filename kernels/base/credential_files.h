// Reading the PEM and bearer-token files named by the security flags, shared by saturn-server
// (server/security.h) and the client tools (clients/common/channel_security.h) so that both sides
// accept and refuse the same files with the same messages. Its own small library
// (saturn_credential_files): the clients link it without the server.
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace saturn {

// The token in `path`: its content without surrounding whitespace; it must be non-empty
// printable ASCII without spaces (an HTTP header value). Errors name `flag`.
absl::StatusOr<std::string> ReadAuthToken(const std::string& path,
                                          const std::string& flag = "--auth_token_file");

// A PEM file's content, or an error naming `flag`.
absl::StatusOr<std::string> ReadPemFile(const std::string& flag, const std::string& path);

}  // namespace saturn
