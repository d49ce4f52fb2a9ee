// The OpenAI-compatible wire format as saturn-load speaks it (clients/load/openai_wire.h): the
// target URL, the request body, /v1/models, error answers, and streams read into records
// (TTFT and ITL from content chunks, the token count from usage, [DONE], error events, streams
// that break off).
#include <gtest/gtest.h>

#include <string>

#include "clients/load/openai_wire.h"
#include "clients/load/sse.h"
#include "nlohmann/json.hpp"

namespace saturn::clients {
namespace {

using nlohmann::json;

TEST(OpenAiWireTest, TargetsParse) {
  absl::StatusOr<HttpTarget> t = ParseHttpTarget("--target", "http://127.0.0.1:8000");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_FALSE(t->https);
  EXPECT_EQ(t->host, "127.0.0.1");
  EXPECT_EQ(t->port, 8000);
  EXPECT_EQ(t->Url(), "http://127.0.0.1:8000");
  t = ParseHttpTarget("--target", "https://vllm.example:443/v1/");  // an SDK's base_url
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_TRUE(t->https);
  EXPECT_EQ(t->Url(), "https://vllm.example:443");
  EXPECT_EQ(ParseHttpTarget("--target", "http://[::1]:8080")->Url(), "http://[::1]:8080");
  EXPECT_EQ(ParseHttpTarget("--target", "http://localhost")->port, 80);
  EXPECT_EQ(ParseHttpTarget("--target", "https://localhost")->port, 443);
  for (const char* bad : {"127.0.0.1:8000", "ftp://a:1", "http://", "http://a:0", "http://a:99999",
                          "http://a:1/v2/completions", "http://::1:80"}) {
    absl::StatusOr<HttpTarget> b = ParseHttpTarget("--openai_target", bad);
    ASSERT_FALSE(b.ok()) << bad;
    EXPECT_EQ(std::string(b.status().message()).rfind("--openai_target: ", 0), 0u) << b.status();
  }
  EXPECT_TRUE(LooksLikeUrl("HTTP://a:1"));
  EXPECT_FALSE(LooksLikeUrl("a:1"));
}

TEST(OpenAiWireTest, BodyCarriesTokenIdsOrTextAndOnlyTheExtensionsAsked) {
  WorkItem ids;
  ids.prompt_token_ids = {5, 6, 7};
  ids.max_tokens = 9;
  CompletionOptions o;
  o.model = "tiny";
  o.temperature = 0.5f;
  o.seed = 42;
  json j = json::parse(CompletionBody(ids, o));
  EXPECT_EQ(j["model"], "tiny");
  EXPECT_EQ(j["prompt"], json({5, 6, 7}));
  EXPECT_EQ(j["max_tokens"], 9);
  EXPECT_DOUBLE_EQ(j["temperature"].get<double>(), 0.5);
  EXPECT_EQ(j["seed"], 42);
  EXPECT_EQ(j["stream"], true);
  EXPECT_EQ(j["stream_options"]["include_usage"], true);
  EXPECT_FALSE(j.contains("ignore_eos"));
  EXPECT_FALSE(j.contains("return_token_ids"));

  WorkItem text;
  text.prompt_text = "Hello";
  text.max_tokens = 3;
  o.ignore_eos = true;
  o.return_token_ids = true;
  j = json::parse(CompletionBody(text, o));
  EXPECT_EQ(j["prompt"], "Hello");
  EXPECT_EQ(j["ignore_eos"], true);
  EXPECT_EQ(j["return_token_ids"], true);
}

TEST(OpenAiWireTest, ModelListGivesIdsAndContext) {
  absl::StatusOr<ModelList> m = ParseModelList(
      R"({"object":"list","data":[{"id":"tiny","object":"model","max_model_len":512,)"
      R"("owned_by":"saturn"},)"
      R"({"id":"other","object":"model"}]})");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->ids, (std::vector<std::string>{"tiny", "other"}));
  EXPECT_EQ(m->max_model_len, (std::vector<int>{512, 0}));
  EXPECT_EQ(m->owned_by, (std::vector<std::string>{"saturn", ""}));
  EXPECT_FALSE(ParseModelList(R"({"data":[]})").ok());
  EXPECT_FALSE(ParseModelList("<html>").ok());
}

TEST(OpenAiWireTest, ErrorMessagesComeFromTheJsonShapesServersUse) {
  EXPECT_EQ(
      ErrorMessage(
          R"({"error":{"message":"max_tokens: must be >= 1","type":"invalid_request_error"}})"),
      "max_tokens: must be >= 1");
  EXPECT_EQ(ErrorMessage(R"({"error":"Input validation error"})"), "Input validation error");
  EXPECT_EQ(ErrorMessage(R"({"detail":"Not Found"})"), "Not Found");
  EXPECT_EQ(ErrorMessage("  plain text\n"), "plain text");
  EXPECT_EQ(ErrorMessage(""), "(empty body)");
  EXPECT_EQ(ErrorMessage(std::string(1000, 'x')).size(), 303u);  // clipped
  EXPECT_EQ(HttpStatusName(429), "HTTP_429");
}

// Reads `stream` (whole SSE text) with one arrival time per event: 1.0, 2.0, ...
RequestRecord ReadStream(const std::string& stream, bool cut_off = false) {
  RequestRecord r;
  CompletionStreamReader reader(&r);
  SseParser sse;
  double t = 0;
  for (const SseEvent& e : sse.Feed(stream)) reader.OnData(e.data, t += 1);
  reader.Finish(cut_off || sse.Pending());
  return r;
}

TEST(OpenAiWireTest, ContentChunksAreTokenTimesAndUsageGivesTheCount) {
  const RequestRecord r = ReadStream(
      "data: {\"choices\":[{\"text\":\"\",\"finish_reason\":null}],\"usage\":null}\n\n"  // 1
      "data: {\"choices\":[{\"text\":\"a\"}]}\n\n"                                       // 2
      "data: {\"choices\":[{\"text\":\"bc\"}]}\n\n"                                      // 3
      "data: {\"choices\":[{\"text\":\"\",\"finish_reason\":\"length\"}]}\n\n"           // 4
      "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":8,\"completion_tokens\":4}}\n\n"
      "data: [DONE]\n\n");  // 6
  EXPECT_TRUE(r.ok()) << r.status << ": " << r.error_message;
  EXPECT_EQ(r.token_times_s, (std::vector<double>{2, 3}));
  EXPECT_EQ(r.token_counts, (std::vector<int>{1, 1}));
  EXPECT_EQ(r.output_tokens, 4);  // usage, not the chunks
  EXPECT_EQ(r.prompt_tokens, 8);
  EXPECT_TRUE(r.has_final);
  EXPECT_DOUBLE_EQ(r.final_s, 6);
}

TEST(OpenAiWireTest, TokenIdsCountAndWithoutUsageTheChunksDo) {
  const RequestRecord r = ReadStream(
      "data: {\"choices\":[{\"text\":\"\",\"token_ids\":[7,8]}]}\n\n"  // partial UTF-8: ids only
      "data: {\"choices\":[{\"text\":\"x\",\"token_ids\":[9]}]}\n\n"
      "data: {\"choices\":[{\"text\":\"y\"}]}\n\n"
      "data: [DONE]\n\n");
  EXPECT_TRUE(r.ok()) << r.error_message;
  EXPECT_EQ(r.token_times_s, (std::vector<double>{1, 2, 3}));
  EXPECT_EQ(r.token_counts, (std::vector<int>{2, 1, 1}));
  EXPECT_EQ(r.output_tokens, 4);
}

TEST(OpenAiWireTest, AnErrorEventFailsTheRequestWithItsMessage) {
  const RequestRecord r = ReadStream(
      "data: {\"choices\":[{\"text\":\"a\"}]}\n\n"
      "data: {\"error\":{\"message\":\"server shutting down\",\"code\":503}}\n\n"
      "data: [DONE]\n\n");
  EXPECT_EQ(r.status, "STREAM_ERROR");
  EXPECT_EQ(r.error_message, "server shutting down");
  EXPECT_FALSE(r.has_final);  // nothing after the error is read
  EXPECT_EQ(r.output_tokens, 1);
}

TEST(OpenAiWireTest, AStreamWithoutDoneIsBroken) {
  RequestRecord r = ReadStream("data: {\"choices\":[{\"text\":\"a\"}]}\n\n");
  EXPECT_EQ(r.status, "STREAM_BROKEN");
  EXPECT_NE(r.error_message.find("[DONE]"), std::string::npos);
  r = ReadStream("data: {\"choices\":[{\"text\":\"a\"}]}\n\ndata: {\"cho");
  EXPECT_EQ(r.status, "STREAM_BROKEN");
  EXPECT_NE(r.error_message.find("inside an event"), std::string::npos) << r.error_message;
  r = ReadStream("data: not json\n\n");
  EXPECT_EQ(r.status, "STREAM_ERROR");
}

// A broken server's replies nested 200k deep overflowed saturn-load's stack in the parser;
// they read as not JSON.
TEST(OpenAiWireTest, RepliesNestedPastAnyRealOneReadAsNotJson) {
  const std::string deep = std::string(200000, '[') + std::string(200000, ']');
  EXPECT_FALSE(ParseModelList("{\"data\": " + deep + "}").ok());
  EXPECT_EQ(ErrorMessage(deep).size(), 303u);  // the body's clipped text
  const RequestRecord r = ReadStream("data: " + deep + "\n\ndata: [DONE]\n\n");
  EXPECT_EQ(r.status, "STREAM_ERROR");
  EXPECT_NE(r.error_message.find("not a JSON object"), std::string::npos) << r.error_message;
}

TEST(OpenAiWireTest, ATransportErrorIsKept) {
  RequestRecord r;
  CompletionStreamReader reader(&r);
  reader.OnData("{\"choices\":[{\"text\":\"a\"}]}", 1);
  r.status = "DEADLINE_EXCEEDED";
  reader.Finish(false);
  EXPECT_EQ(r.status, "DEADLINE_EXCEEDED");
  EXPECT_EQ(r.output_tokens, 1);
}

}  // namespace
}  // namespace saturn::clients
