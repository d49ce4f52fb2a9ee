// ParseRequest: wire-format check through UnknownFieldSet, UTF-8 check of every string field
// (nested messages too) against the descriptor, then the real parse.
#include "server/grpc/raw_message.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/unknown_field_set.h>
#include <grpcpp/impl/codegen/proto_utils.h>

#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/base/utf8.h"

namespace saturn {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::UnknownField;
using google::protobuf::UnknownFieldSet;

// Deep enough for any saturn.v1 request; deeper nesting is refused rather than recursed into.
constexpr int kMaxDepth = 16;

// OK, or the first string field (path from the top message) that is not UTF-8.
absl::Status CheckStrings(const UnknownFieldSet& fields, const Descriptor* type,
                          const std::string& prefix, int depth) {
  for (int i = 0; i < fields.field_count(); ++i) {
    const UnknownField& f = fields.field(i);
    if (f.type() != UnknownField::TYPE_LENGTH_DELIMITED) continue;
    const FieldDescriptor* fd = type->FindFieldByNumber(f.number());
    if (fd == nullptr) continue;  // unknown fields are kept as bytes, never checked
    const std::string name = absl::StrCat(prefix, fd->name());
    if (fd->type() == FieldDescriptor::TYPE_STRING) {
      const size_t bad = InvalidUtf8Offset(f.length_delimited());
      if (bad != std::string_view::npos) {
        return absl::InvalidArgumentError(absl::StrCat(
            name, ": not valid UTF-8 at byte ", bad, " of ", f.length_delimited().size(),
            " (a string field must be UTF-8",
            fd->name() == "prompt_text" ? "; send arbitrary bytes as prompt_token_ids" : "", ")"));
      }
    } else if (fd->type() == FieldDescriptor::TYPE_MESSAGE) {
      if (depth >= kMaxDepth) {
        return absl::InvalidArgumentError(absl::StrCat(name, ": nested deeper than ", kMaxDepth));
      }
      UnknownFieldSet inner;
      if (!inner.ParseFromString(f.length_delimited())) {
        return absl::InvalidArgumentError(
            absl::StrCat(name, ": malformed protobuf wire format (truncated or garbage bytes)"));
      }
      if (absl::Status s = CheckStrings(inner, fd->message_type(), name + ".", depth + 1);
          !s.ok()) {
        return s;
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ParseRequest(std::string_view bytes, google::protobuf::Message* out) {
  out->Clear();
  const std::string& type = out->GetDescriptor()->full_name();
  UnknownFieldSet fields;
  if (!fields.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return absl::InvalidArgumentError(absl::StrCat("request: not a valid ", type, " (",
                                                   bytes.size(),
                                                   " bytes of malformed protobuf wire format: "
                                                   "truncated or garbage)"));
  }
  if (absl::Status s = CheckStrings(fields, out->GetDescriptor(), "", 0); !s.ok()) return s;
  if (!out->ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    // Well-formed wire format whose values do not fit the fields (e.g. a packed field with
    // a broken varint).
    return absl::InvalidArgumentError(
        absl::StrCat("request: not a valid ", type, " (", bytes.size(),
                     " bytes whose field values do not match the message's types)"));
  }
  return absl::OkStatus();
}

absl::Status ParseRequest(const grpc::ByteBuffer& bytes, google::protobuf::Message* out) {
  std::vector<grpc::Slice> slices;
  if (!bytes.Dump(&slices).ok()) {
    return absl::InvalidArgumentError("request: cannot read the message bytes");
  }
  if (slices.size() == 1) {
    return ParseRequest(
        std::string_view(reinterpret_cast<const char*>(slices[0].begin()), slices[0].size()), out);
  }
  std::string joined;
  joined.reserve(bytes.Length());
  for (const grpc::Slice& s : slices) {
    joined.append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  return ParseRequest(joined, out);
}

void SerializeResponse(const google::protobuf::Message& message, grpc::ByteBuffer* out) {
  out->Clear();  // the serializer requires an empty buffer
  bool own_buffer = false;
  // The same serializer gRPC's generated handlers use.
  grpc::SerializationTraits<google::protobuf::Message>::Serialize(message, out, &own_buffer);
}

}  // namespace saturn
