// Request parsing and response serialization for the raw (grpc::ByteBuffer) handlers of
// saturn.v1.Saturn. gRPC's own deserialization answers an unparseable request with
// UNIMPLEMENTED and an empty message (indistinguishable from a missing method), and
// libprotobuf logs one ERROR line per request with invalid UTF-8. ParseRequest instead
// returns INVALID_ARGUMENT saying what is wrong (malformed wire format, or which string field
// is not UTF-8 at which byte) and never makes libprotobuf log: string fields are checked
// before the message is parsed. The bytes on the wire are the same as with generated
// handlers. Pure functions, thread-safe.
#pragma once

#include <google/protobuf/message.h>
#include <grpcpp/support/byte_buffer.h>

#include <string>
#include <string_view>

#include "absl/status/status.h"

namespace saturn {

// Parses `bytes` into `out` (cleared first). INVALID_ARGUMENT names the message type and,
// for invalid UTF-8, the field.
absl::Status ParseRequest(std::string_view bytes, google::protobuf::Message* out);
absl::Status ParseRequest(const grpc::ByteBuffer& bytes, google::protobuf::Message* out);

// `message` serialized into `out` (replacing what it held).
void SerializeResponse(const google::protobuf::Message& message, grpc::ByteBuffer* out);

}  // namespace saturn
