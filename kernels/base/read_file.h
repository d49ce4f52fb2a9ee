// ReadFileBounded: the one way Saturn reads a whole file it is handed (a config, a tokenizer,
// a token or certificate, a calibration, a prompts file, a recording). A path that is not a
// regular file is refused before it is read (a FIFO blocked forever, /dev/zero read until
// memory ran out, a directory read as empty), and so is a file over `max_bytes`. Errors
// start with the path; callers add the flag or file role. Header-only (the server, clients
// and tools share it without a library).
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

namespace saturn {

// Limits by role: far above any real file of that kind, far below a mistake's size.
inline constexpr int64_t kMaxConfigFileBytes = int64_t{64} << 20;     // config, index, calibration
inline constexpr int64_t kMaxTokenizerFileBytes = int64_t{1} << 30;   // tokenizer.json
inline constexpr int64_t kMaxCredentialFileBytes = int64_t{1} << 20;  // a token, a PEM file
inline constexpr int64_t kMaxDataFileBytes = int64_t{4} << 30;        // prompts, recordings

inline absl::StatusOr<std::string> ReadFileBounded(const std::string& path, int64_t max_bytes) {
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer.
  const int fd = open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    return absl::Status(
        err == ENOENT ? absl::StatusCode::kNotFound : absl::StatusCode::kInvalidArgument,
        absl::StrCat(path, ": cannot open (", std::strerror(err), ")"));
  }
  struct Closer {
    int fd;
    ~Closer() { close(fd); }
  } closer{fd};
  struct stat st = {};
  if (fstat(fd, &st) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": cannot stat (", std::strerror(errno), ")"));
  }
  if (!S_ISREG(st.st_mode)) {
    const char* kind = S_ISDIR(st.st_mode)    ? "a directory"
                       : S_ISFIFO(st.st_mode) ? "a FIFO"
                       : S_ISCHR(st.st_mode)  ? "a character device"
                       : S_ISBLK(st.st_mode)  ? "a block device"
                       : S_ISSOCK(st.st_mode) ? "a socket"
                                              : "not a regular file";
    return absl::InvalidArgumentError(absl::StrCat(path, ": is ", kind, ", not a file"));
  }
  if (st.st_size > max_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": is ", st.st_size, " bytes, over the limit of ", max_bytes));
  }
  std::string text(static_cast<size_t>(st.st_size), '\0');
  size_t got = 0;
  while (got < text.size()) {
    const ssize_t n = read(fd, text.data() + got, text.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      return absl::DataLossError(absl::StrCat(path, ": read failed (", std::strerror(errno), ")"));
    }
    if (n == 0) break;  // shrank since the stat
    got += static_cast<size_t>(n);
  }
  text.resize(got);
  return text;
}

}  // namespace saturn
