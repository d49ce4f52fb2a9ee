// What the server needs to know about --listen beyond its syntax (server_config.cc checks
// that): whether it is reachable only from this host, whether a unix socket path is already
// served by a live process, and why a TCP bind failed. POSIX sockets; no gRPC.
#pragma once

#include <string>

#include "absl/status/status.h"

namespace saturn {

// True for unix: paths and loopback hosts (localhost, 127.0.0.0/8, ::1).
bool IsLoopbackListen(const std::string& listen);

// For a unix: address whose socket file accepts connections (another server owns it; gRPC
// would unlink it and take it over): UNAVAILABLE "address in use". OK otherwise and for TCP.
absl::Status CheckUnixSocketFree(const std::string& listen);

// Why binding a TCP host:port fails now ("address in use", or the system's reason), found by
// binding a probe socket; empty when the probe binds (the failure was something else).
std::string TcpBindError(const std::string& listen);

}  // namespace saturn
