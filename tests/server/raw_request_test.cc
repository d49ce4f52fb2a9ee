// Requests gRPC cannot parse into the method's message (invalid UTF-8 in a string field,
// truncated or garbage bytes) are INVALID_ARGUMENT with a message naming the problem, for
// every saturn.v1.Saturn and saturn.v1.Diagnostics method, never UNIMPLEMENTED; libprotobuf writes
// nothing to the log for them; well-formed raw bytes still work. Sent through a raw
// (grpc::ByteBuffer) client.
#include <grpcpp/grpcpp.h>
#include <grpcpp/impl/codegen/client_unary_call.h>
#include <grpcpp/impl/codegen/sync_stream.h>
#include <gtest/gtest.h>

#include <string>

#include "kernels/base/utf8.h"
#include "saturn/v1/diagnostics.pb.h"
#include "server/grpc/raw_message.h"
#include "tests/server/server_test_util.h"

namespace saturn {
namespace {

grpc::ByteBuffer Bytes(const std::string& s) {
  grpc::Slice slice(s);
  return grpc::ByteBuffer(&slice, 1);
}

grpc::Status RawUnary(grpc::Channel* channel, const std::string& method, const std::string& body,
                      grpc::ByteBuffer* response) {
  grpc::ClientContext ctx;
  ctx.set_deadline(testing::In(std::chrono::seconds(30)));
  const grpc::internal::RpcMethod rpc(method.c_str(), grpc::internal::RpcMethod::NORMAL_RPC);
  return grpc::internal::BlockingUnaryCall<grpc::ByteBuffer, grpc::ByteBuffer>(
      channel, rpc, &ctx, Bytes(body), response);
}

// A server-streaming call with a raw request; returns the status and counts the messages.
grpc::Status RawStream(grpc::Channel* channel, const std::string& method, const std::string& body,
                       int* messages) {
  grpc::ClientContext ctx;
  ctx.set_deadline(testing::In(std::chrono::seconds(60)));
  const grpc::internal::RpcMethod rpc(method.c_str(), grpc::internal::RpcMethod::SERVER_STREAMING);
  std::unique_ptr<grpc::ClientReader<grpc::ByteBuffer>> reader(
      grpc::internal::ClientReaderFactory<grpc::ByteBuffer>::Create(channel, rpc, &ctx,
                                                                    Bytes(body)));
  grpc::ByteBuffer msg;
  *messages = 0;
  while (reader->Read(&msg)) ++*messages;
  return reader->Finish();
}

constexpr const char* kGenerate = "/saturn.v1.Saturn/Generate";
constexpr const char* kInfo = "/saturn.v1.Saturn/GetServerInfo";
constexpr const char* kUpdate = "/saturn.v1.Saturn/UpdateEngineOptions";

// prompt_text (field 1, length-delimited) holding `text`, plus max_tokens (field 3) = 2.
std::string GenerateWithText(const std::string& text) {
  std::string b;
  b.push_back(0x0A);
  b.push_back(static_cast<char>(text.size()));
  b += text;
  b += std::string("\x18\x02", 2);
  return b;
}

class RawRequestTest : public testing::SharedServerTest {};

TEST_F(RawRequestTest, InvalidUtf8PromptTextIsInvalidArgumentNamingTheField) {
  ::testing::internal::CaptureStderr();
  for (int i = 0; i < 20; ++i) {
    int messages = -1;
    grpc::Status st =
        RawStream(server_->channel.get(), kGenerate, GenerateWithText("ab\xC3\x28zz"), &messages);
    ASSERT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << st.error_message();
    EXPECT_NE(st.error_message().find("prompt_text"), std::string::npos) << st.error_message();
    EXPECT_NE(st.error_message().find("UTF-8"), std::string::npos) << st.error_message();
    EXPECT_NE(st.error_message().find("byte 2"), std::string::npos) << st.error_message();
    EXPECT_EQ(messages, 0);
  }
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(log.find("libprotobuf"), std::string::npos) << log;
  // The same bytes with valid UTF-8 generate.
  int messages = 0;
  grpc::Status st =
      RawStream(server_->channel.get(), kGenerate, GenerateWithText("ab\xC3\xA9zz"), &messages);
  EXPECT_TRUE(st.ok()) << st.error_message();
  EXPECT_GE(messages, 2);  // deltas, then the final message
}

TEST_F(RawRequestTest, GarbageAndTruncatedBytesAreInvalidArgumentForEveryMethod) {
  const std::string full = GenerateWithText("hello");
  const std::vector<std::string> bad = {
      full.substr(0, 4),                   // truncated inside prompt_text
      std::string("\xFF\xFF\xFF\xFF", 4),  // field 0 / bad varint
      std::string("\x0A\x7F", 2),          // length beyond the message
      std::string("\x0F", 1),              // wire type 7 does not exist
  };
  for (const std::string& body : bad) {
    SCOPED_TRACE(::testing::PrintToString(body));
    int messages = -1;
    grpc::Status st = RawStream(server_->channel.get(), kGenerate, body, &messages);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << st.error_message();
    EXPECT_NE(st.error_message().find("saturn.v1.GenerateRequest"), std::string::npos)
        << st.error_message();
    grpc::ByteBuffer resp;
    st = RawUnary(server_->channel.get(), kInfo, body, &resp);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << st.error_message();
    st = RawUnary(server_->channel.get(), kUpdate, body, &resp);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << st.error_message();
    EXPECT_NE(st.error_message().find("UpdateEngineOptionsRequest"), std::string::npos)
        << st.error_message();
  }
  // A packed prompt_token_ids (field 2) whose varint is cut off: well-formed as bytes, not
  // as the field's values.
  int messages = -1;
  grpc::Status st =
      RawStream(server_->channel.get(), kGenerate, std::string("\x12\x02\x05\x80", 4), &messages);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << st.error_message();
  // The server still serves, and a well-formed raw GetServerInfo parses as ServerInfo.
  grpc::ByteBuffer resp;
  st = RawUnary(server_->channel.get(), kInfo, "", &resp);
  ASSERT_TRUE(st.ok()) << st.error_message();
  std::string bytes;
  ASSERT_TRUE(testing::BufferBytes(resp, &bytes));
  v1::ServerInfo info;
  ASSERT_TRUE(info.ParseFromString(bytes));
  EXPECT_EQ(info.model().name(), "tiny");
}

// The bytes `resp` holds, as one string.
std::string Flatten(const grpc::ByteBuffer& resp) {
  std::string bytes;
  EXPECT_TRUE(testing::BufferBytes(resp, &bytes));
  return bytes;
}

TEST_F(RawRequestTest, GarbageBytesAreInvalidArgumentForEveryDiagnosticsMethod) {
  const std::vector<std::string> bad = {
      std::string("\xFF\xFF\xFF\xFF", 4),  // field 0 / bad varint
      std::string("\x0A\x7F", 2),          // length beyond the message
      std::string("\x0F", 1),              // wire type 7 does not exist
      std::string("\x08", 1),              // a tag with its value cut off
  };
  struct Unary {
    const char* method;
    const char* request_type;
  };
  const Unary unary[] = {
      {"/saturn.v1.Diagnostics/GetDiagnostics", "saturn.v1.GetDiagnosticsRequest"},
      {"/saturn.v1.Diagnostics/ExportTrace", "saturn.v1.ExportTraceRequest"},
      {"/saturn.v1.Diagnostics/Recalibrate", "saturn.v1.RecalibrateRequest"},
  };
  ::testing::internal::CaptureStderr();
  for (const std::string& body : bad) {
    SCOPED_TRACE(::testing::PrintToString(body));
    for (const Unary& u : unary) {
      SCOPED_TRACE(u.method);
      grpc::ByteBuffer resp;
      grpc::Status st = RawUnary(server_->channel.get(), u.method, body, &resp);
      EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << st.error_message();
      EXPECT_NE(st.error_message().find(u.request_type), std::string::npos) << st.error_message();
      EXPECT_NE(st.error_message().find("malformed"), std::string::npos) << st.error_message();
    }
    int messages = -1;
    grpc::Status st = RawStream(server_->channel.get(), "/saturn.v1.Diagnostics/WatchDiagnostics",
                                body, &messages);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << st.error_message();
    EXPECT_NE(st.error_message().find("saturn.v1.WatchDiagnosticsRequest"), std::string::npos)
        << st.error_message();
    EXPECT_EQ(messages, 0);
  }
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(log.find("libprotobuf"), std::string::npos) << log;
  // Well-formed raw requests still work, and the replies parse as their messages.
  grpc::ByteBuffer resp;
  grpc::Status st =
      RawUnary(server_->channel.get(), "/saturn.v1.Diagnostics/GetDiagnostics", "", &resp);
  ASSERT_TRUE(st.ok()) << st.error_message();
  v1::DiagnosticsReport report;
  EXPECT_TRUE(report.ParseFromString(Flatten(resp)));
  st = RawUnary(server_->channel.get(), "/saturn.v1.Diagnostics/ExportTrace", "", &resp);
  ASSERT_TRUE(st.ok()) << st.error_message();
  v1::ExportTraceResponse trace;
  ASSERT_TRUE(trace.ParseFromString(Flatten(resp)));
  EXPECT_FALSE(trace.trace_json().empty());
  // One report from a watch (interval 100 ms, field 2), ended by its deadline.
  grpc::ClientContext ctx;
  ctx.set_deadline(testing::In(std::chrono::seconds(5)));
  const grpc::internal::RpcMethod rpc("/saturn.v1.Diagnostics/WatchDiagnostics",
                                      grpc::internal::RpcMethod::SERVER_STREAMING);
  std::unique_ptr<grpc::ClientReader<grpc::ByteBuffer>> reader(
      grpc::internal::ClientReaderFactory<grpc::ByteBuffer>::Create(
          server_->channel.get(), rpc, &ctx, Bytes(std::string("\x10\x64", 2))));
  grpc::ByteBuffer msg;
  ASSERT_TRUE(reader->Read(&msg));
  v1::DiagnosticsReport watched;
  EXPECT_TRUE(watched.ParseFromString(Flatten(msg)));
  ctx.TryCancel();
  reader->Finish();
}

TEST(RawMessageTest, InvalidUtf8OffsetFollowsRfc3629) {
  EXPECT_EQ(InvalidUtf8Offset(""), std::string_view::npos);
  EXPECT_EQ(InvalidUtf8Offset("plain ascii"), std::string_view::npos);
  EXPECT_EQ(InvalidUtf8Offset("\xC3\xA9\xE2\x99\x84\xF0\x9F\x98\x80"), std::string_view::npos);
  EXPECT_EQ(InvalidUtf8Offset("a\x80"), 1u);             // lone continuation byte
  EXPECT_EQ(InvalidUtf8Offset("ab\xC3"), 2u);            // cut short
  EXPECT_EQ(InvalidUtf8Offset("\xC0\xAF"), 0u);          // overlong '/'
  EXPECT_EQ(InvalidUtf8Offset("\xE0\x80\xAF"), 0u);      // overlong
  EXPECT_EQ(InvalidUtf8Offset("x\xED\xA0\x80"), 1u);     // surrogate U+D800
  EXPECT_EQ(InvalidUtf8Offset("\xF4\x90\x80\x80"), 0u);  // above U+10FFFF
  EXPECT_EQ(InvalidUtf8Offset("\xF5\x80\x80\x80"), 0u);
  EXPECT_EQ(InvalidUtf8Offset("\xE2\x28\xA1"), 0u);
}

// Whatever ParseRequest accepts, libprotobuf's own parser accepts too, and the reverse for
// UTF-8: ParseRequest never passes bytes that would make libprotobuf log.
TEST(RawMessageTest, ParseRequestAgreesWithProtobufOnStrings) {
  v1::GenerateRequest req;
  for (const std::string& text : {std::string("ok"), std::string("\xC3\xA9"),
                                  std::string("\xED\xA0\x80"), std::string("\xC3")}) {
    const absl::Status st = ParseRequest(GenerateWithText(text), &req);
    EXPECT_EQ(st.ok(), InvalidUtf8Offset(text) == std::string_view::npos) << st;
    if (st.ok()) EXPECT_EQ(req.prompt_text(), text);
  }
}

}  // namespace
}  // namespace saturn
