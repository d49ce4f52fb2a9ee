// IsLoopbackListen, CheckUnixSocketFree, TcpBindError: small POSIX probes.
#include "server/listen_address.h"

#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace saturn {
namespace {

// host and port of host:port, brackets of an IPv6 literal removed.
void SplitHostPort(const std::string& listen, std::string* host, std::string* port) {
  const size_t colon = listen.rfind(':');
  *host = listen.substr(0, colon);
  *port = colon == std::string::npos ? "" : listen.substr(colon + 1);
  if (host->size() >= 2 && host->front() == '[' && host->back() == ']') {
    *host = host->substr(1, host->size() - 2);
  }
}

}  // namespace

bool IsLoopbackListen(const std::string& listen) {
  if (absl::StartsWith(listen, "unix:")) return true;
  std::string host, port;
  SplitHostPort(listen, &host, &port);
  return host == "localhost" || host == "::1" || absl::StartsWith(host, "127.");
}

absl::Status CheckUnixSocketFree(const std::string& listen) {
  if (!absl::StartsWith(listen, "unix:")) return absl::OkStatus();
  const std::string path = listen.substr(5);
  sockaddr_un addr{};
  if (path.size() >= sizeof(addr.sun_path)) {
    return absl::InvalidArgumentError(absl::StrCat("--listen: unix socket path \"", path,
                                                   "\" is longer than ", sizeof(addr.sun_path) - 1,
                                                   " bytes"));
  }
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::OkStatus();
  const bool live = connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) == 0;
  close(fd);
  if (live) {
    return absl::UnavailableError(
        absl::StrCat("--listen: cannot listen on ", listen,
                     ": address in use (a running process accepts connections on that socket)"));
  }
  return absl::OkStatus();
}

std::string TcpBindError(const std::string& listen) {
  std::string host, port;
  SplitHostPort(listen, &host, &port);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  if (const int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), port.c_str(), &hints, &res);
      rc != 0) {
    return absl::StrCat("cannot resolve host \"", host, "\": ", gai_strerror(rc));
  }
  std::string error;
  for (addrinfo* ai = res; ai != nullptr && error.empty(); ai = ai->ai_next) {
    const int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) continue;
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));  // as gRPC binds
    if (bind(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
      error = errno == EADDRINUSE ? "address in use (another process listens on that port)"
                                  : std::strerror(errno);
    }
    close(fd);
  }
  freeaddrinfo(res);
  return error;
}

}  // namespace saturn
