// ReadAuthToken and ReadPemFile (credential_files.h).
#include "kernels/base/credential_files.h"

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "kernels/base/read_file.h"

namespace saturn {
namespace {

absl::StatusOr<std::string> ReadWhole(const std::string& flag, const std::string& path) {
  absl::StatusOr<std::string> text = ReadFileBounded(path, kMaxCredentialFileBytes);
  if (!text.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, ": cannot read ", text.status().message()));
  }
  return text;
}

}  // namespace

absl::StatusOr<std::string> ReadAuthToken(const std::string& path, const std::string& flag) {
  absl::StatusOr<std::string> text = ReadWhole(flag, path);
  if (!text.ok()) return text.status();
  const std::string token(absl::StripAsciiWhitespace(*text));
  if (token.empty()) return absl::InvalidArgumentError(absl::StrCat(flag, ": ", path, " is empty"));
  for (char c : token) {
    if (c <= ' ' || c > '~') {
      return absl::InvalidArgumentError(
          absl::StrCat(flag, ": the token in ", path,
                       " must be printable ASCII without spaces (it is sent as a header)"));
    }
  }
  return token;
}

absl::StatusOr<std::string> ReadPemFile(const std::string& flag, const std::string& path) {
  absl::StatusOr<std::string> text = ReadWhole(flag, path);
  if (!text.ok()) return text.status();
  if (text->find("-----BEGIN") == std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(flag, ": ", path, " is not a PEM file"));
  }
  return text;
}

}  // namespace saturn
