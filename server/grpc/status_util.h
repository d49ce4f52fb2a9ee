// absl::Status <-> grpc::Status. The canonical codes are numerically identical, so the mapping
// is 1:1 and keeps the message. Owns nothing else.
#pragma once

#include <grpcpp/support/status.h>

#include <string>

#include "absl/status/status.h"

namespace saturn {

inline grpc::Status ToGrpcStatus(const absl::Status& s) {
  if (s.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()));
}

}  // namespace saturn
