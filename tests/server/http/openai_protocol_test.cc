// The OpenAI wire format: request fields -> saturn.v1.GenerateRequest, refusals by name, the
// error shape and status codes, and the response JSON.
#include "server/http/openai_protocol.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

namespace saturn {
namespace {

using Json = nlohmann::json;

absl::StatusOr<CompletionRequest> Parse(const Json& body) {
  return ParseCompletionRequest(body.dump());
}

// The field an INVALID_ARGUMENT names, as OpenAI's `param`.
std::string Param(const absl::Status& s) {
  return Json::parse(ErrorJson(s))["error"]["param"].get<std::string>();
}

TEST(OpenAiProtocolTest, MapsEveryFieldOntoTheGenerateRequest) {
  absl::StatusOr<CompletionRequest> r = Parse({{"model", "m"},
                                               {"prompt", "hi"},
                                               {"max_tokens", 7},
                                               {"temperature", 0.5},
                                               {"top_p", 0.9},
                                               {"top_k", 5},
                                               {"seed", 42},
                                               {"logprobs", 3},
                                               {"ignore_eos", true},
                                               {"stop_token_ids", {4, 5}},
                                               {"stop", "\n"},
                                               {"stream", true},
                                               {"stream_options", {{"include_usage", true}}},
                                               {"return_token_ids", true},
                                               {"user", "u"},
                                               {"n", 1},
                                               {"echo", false},
                                               {"some_future_field", 1}});
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->requests.size(), 1u);
  const v1::GenerateRequest& g = r->requests[0];
  EXPECT_EQ(r->model, "m");
  EXPECT_EQ(g.prompt_text(), "hi");
  EXPECT_EQ(g.max_tokens(), 7);
  EXPECT_FLOAT_EQ(g.temperature(), 0.5f);
  EXPECT_FLOAT_EQ(g.top_p(), 0.9f);
  EXPECT_EQ(g.top_k(), 5);
  EXPECT_EQ(g.seed(), 42);
  EXPECT_EQ(g.logprobs(), 3);
  EXPECT_TRUE(g.ignore_eos());
  ASSERT_EQ(g.stop_token_ids_size(), 2);
  EXPECT_EQ(g.stop_token_ids(1), 5);
  EXPECT_EQ(r->stop, std::vector<std::string>{"\n"});
  EXPECT_TRUE(r->stream);
  EXPECT_TRUE(r->include_usage);
  EXPECT_TRUE(r->return_token_ids);
}

TEST(OpenAiProtocolTest, DefaultsAreOpenAis) {
  absl::StatusOr<CompletionRequest> r = Parse({{"prompt", {1, 2, 3}}});
  ASSERT_TRUE(r.ok()) << r.status();
  const v1::GenerateRequest& g = r->requests.at(0);
  EXPECT_FLOAT_EQ(g.temperature(), 1.0f);  // OpenAI and vLLM sample by default
  EXPECT_FALSE(g.has_max_tokens());        // the engine's 16, OpenAI's default too
  EXPECT_FALSE(g.has_logprobs());
  EXPECT_FALSE(r->stream);
  EXPECT_EQ(g.prompt_token_ids_size(), 3);
}

TEST(OpenAiProtocolTest, PromptFormsOfOneRequest) {
  EXPECT_EQ(Parse({{"prompt", {"text"}}})->requests.at(0).prompt_text(), "text");
  EXPECT_EQ(Parse({{"prompt", {{7, 8}}}})->requests.at(0).prompt_token_ids_size(), 2);
  EXPECT_EQ(Param(Parse({{"prompt", Json::array()}}).status()), "prompt");
  EXPECT_EQ(Param(Parse({{"prompt", 5}}).status()), "prompt");
  EXPECT_EQ(Param(Parse({{"max_tokens", 5}}).status()), "prompt");  // missing
  EXPECT_EQ(Param(Parse({{"prompt", {1, -2}}}).status()), "prompt[1]");
  EXPECT_EQ(Param(Parse({{"prompt", {1, "2"}}}).status()), "prompt[1]");
  EXPECT_EQ(Parse({{"prompt", "x"}, {"top_k", -1}})->requests.at(0).top_k(), 0);  // vLLM's "off"
}

// A list of prompts (texts, token-id lists, or both) is one request per prompt, in order, each
// with every sampling field; errors name the prompt, and the list has a limit.
TEST(OpenAiProtocolTest, AListOfPromptsIsOneRequestPerPrompt) {
  absl::StatusOr<CompletionRequest> r =
      Parse({{"prompt", Json::array({"a", Json::array({7, 8, 9}), "bc"})},
             {"max_tokens", 5},
             {"temperature", 0},
             {"seed", 11},
             {"stop_token_ids", {4}},
             {"logprobs", 2}});
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->requests.size(), 3u);
  EXPECT_EQ(r->requests[0].prompt_text(), "a");
  EXPECT_EQ(r->requests[1].prompt_token_ids_size(), 3);
  EXPECT_EQ(r->requests[1].prompt_token_ids(2), 9);
  EXPECT_TRUE(r->requests[1].prompt_text().empty());
  EXPECT_EQ(r->requests[2].prompt_text(), "bc");
  for (const v1::GenerateRequest& g : r->requests) {
    EXPECT_EQ(g.max_tokens(), 5);
    EXPECT_FLOAT_EQ(g.temperature(), 0.0f);
    EXPECT_EQ(g.seed(), 11);
    ASSERT_EQ(g.stop_token_ids_size(), 1);  // not one per prompt merged in
    EXPECT_EQ(g.logprobs(), 2);
  }
  const auto many = [](int n) { return Json({{"prompt", std::vector<std::string>(n, "x")}}); };
  EXPECT_EQ(Parse(many(kMaxPrompts))->requests.size(), static_cast<size_t>(kMaxPrompts));
  const absl::Status s = Parse(many(kMaxPrompts + 1)).status();
  EXPECT_EQ(s.message(), "prompt: at most 64 prompts, got 65");
  EXPECT_EQ(Param(s), "prompt");
  EXPECT_EQ(Param(Parse({{"prompt", {"a", ""}}}).status()), "prompt[1]");
  EXPECT_EQ(Param(Parse({{"prompt", Json::array({Json::array({1}), Json::array()})}}).status()),
            "prompt[1]");
  EXPECT_EQ(Param(Parse({{"prompt", Json::array({"a", 5})}}).status()), "prompt[1]");
  EXPECT_EQ(
      Param(Parse({{"prompt", Json::array({Json::array({1}), Json::array({2, -1})})}}).status()),
      "prompt[1][1]");
  EXPECT_EQ(Param(Parse({{"prompt", Json::array({Json::array({Json::array({1})})})}}).status()),
            "prompt[0][0]");
}

TEST(OpenAiProtocolTest, UnsupportedFieldsAreRefusedByName) {
  for (const auto& [field, value] :
       std::vector<std::pair<std::string, Json>>{{"echo", true},
                                                 {"n", 2},
                                                 {"best_of", 3},
                                                 {"suffix", "s"},
                                                 {"presence_penalty", 0.5},
                                                 {"frequency_penalty", -1},
                                                 {"repetition_penalty", 1.2},
                                                 {"logit_bias", {{"5", 1}}},
                                                 {"min_tokens", 3}}) {
    Json body = {{"prompt", "x"}};
    body[field] = value;
    absl::StatusOr<CompletionRequest> r = Parse(body);
    ASSERT_FALSE(r.ok()) << field;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(Param(r.status()), field);
  }
  // Asking for the default is fine.
  EXPECT_TRUE(
      Parse({{"prompt", "x"}, {"n", 1}, {"presence_penalty", 0}, {"logit_bias", Json::object()}})
          .ok());
}

TEST(OpenAiProtocolTest, BadValuesNameTheFieldAndTheLimit) {
  absl::Status s = Parse({{"prompt", "x"}, {"max_tokens", 0}}).status();
  EXPECT_EQ(Param(s), "max_tokens");
  EXPECT_NE(s.message().find("[1, "), absl::string_view::npos) << s;
  EXPECT_EQ(Param(Parse({{"prompt", "x"}, {"logprobs", 21}}).status()), "logprobs");
  EXPECT_EQ(Param(Parse({{"prompt", "x"}, {"temperature", "hot"}}).status()), "temperature");
  EXPECT_EQ(Param(Parse({{"prompt", "x"}, {"stream_options", {{"include_usage", true}}}}).status()),
            "stream_options");
  EXPECT_EQ(Param(Parse({{"prompt", "x"}, {"stop", Json::array({"a", ""})}}).status()), "stop[1]");
  Json many = Json::array();
  for (int i = 0; i <= kMaxStopStrings; ++i) many.push_back("s" + std::to_string(i));
  EXPECT_EQ(Param(Parse({{"prompt", "x"}, {"stop", many}}).status()), "stop");
  EXPECT_FALSE(ParseCompletionRequest("{not json").ok());
  EXPECT_FALSE(ParseCompletionRequest("[1]").ok());
}

TEST(OpenAiProtocolTest, NumbersOutsideTheEnginesTypesAreRefusedNotWrapped) {
  // 2^64 - 1 parses as an unsigned integer; read as int64 it was -1.
  absl::Status s =
      ParseCompletionRequest(R"({"prompt": "x", "seed": 18446744073709551615})").status();
  EXPECT_EQ(Param(s), "seed");
  EXPECT_NE(s.message().find("18446744073709551615"), absl::string_view::npos) << s;
  EXPECT_EQ(Param(ParseCompletionRequest(R"({"prompt": "x", "max_tokens": 18446744073709551615})")
                      .status()),
            "max_tokens");
  // 1e39 as f32 is inf: refused with the value given.
  s = Parse({{"prompt", "x"}, {"temperature", 1e39}}).status();
  EXPECT_EQ(Param(s), "temperature");
  EXPECT_NE(s.message().find("1e+39"), absl::string_view::npos) << s;
  EXPECT_EQ(Param(Parse({{"prompt", "x"}, {"top_p", -1e300}}).status()), "top_p");
  EXPECT_TRUE(Parse({{"prompt", "x"}, {"temperature", 3e38}}).ok());
  EXPECT_TRUE(ParseCompletionRequest(R"({"prompt": "x", "seed": 9223372036854775807})").ok());
}

TEST(OpenAiProtocolTest, DeeplyNestedBodiesAreRefusedBeforeTheParse) {
  const auto nested = [](int depth) {
    return R"({"prompt": "x", "user_data": )" + std::string(depth, '[') + std::string(depth, ']') +
           "}";
  };
  // The body object holds the list: depth + 1 levels.
  EXPECT_TRUE(ParseCompletionRequest(nested(kMaxJsonDepth - 1)).ok());
  const absl::Status s = ParseCompletionRequest(nested(100000)).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("100001 deep"), absl::string_view::npos) << s;
  EXPECT_NE(s.message().find("limit is 32"), absl::string_view::npos) << s;
  // Brackets inside strings (escaped quotes too) do not count.
  const std::string in_string = R"({"prompt": "\"[[[[)" + std::string(100, '[') + R"("})";
  EXPECT_TRUE(ParseCompletionRequest(in_string).ok()) << ParseCompletionRequest(in_string).status();
}

TEST(OpenAiProtocolTest, ErrorsUseOpenAisShapeAndStatus) {
  EXPECT_EQ(HttpStatus(absl::InvalidArgumentError("x: y")), 400);
  EXPECT_EQ(HttpStatus(absl::UnauthenticatedError("no")), 401);
  EXPECT_EQ(HttpStatus(absl::NotFoundError("no")), 404);
  EXPECT_EQ(HttpStatus(absl::ResourceExhaustedError("full")), 429);
  EXPECT_EQ(HttpStatus(absl::UnavailableError("draining")), 503);
  EXPECT_EQ(HttpStatus(absl::InternalError("kernel")), 500);
  const Json e = Json::parse(ErrorJson(absl::ResourceExhaustedError("queue full")));
  EXPECT_EQ(e["error"]["message"], "queue full");
  EXPECT_EQ(e["error"]["type"], "rate_limit_error");
  EXPECT_EQ(e["error"]["code"], 429);
  // The engine's field names for the prompt become the API's.
  EXPECT_EQ(InApiTerms(absl::InvalidArgumentError("prompt_token_ids: 9 ids")).message(),
            "prompt: 9 ids");
  EXPECT_EQ(InApiTerms(absl::InvalidArgumentError("max_tokens: x")).message(), "max_tokens: x");
  // One prompt of several: named by its index.
  EXPECT_EQ(InApiTerms(absl::InvalidArgumentError("prompt_token_ids[3]: id 9"), 2).message(),
            "prompt[2][3]: id 9");
  EXPECT_EQ(InApiTerms(absl::InvalidArgumentError("prompt_text: too long"), 0).message(),
            "prompt[0]: too long");
  const absl::Status other = InApiTerms(absl::InvalidArgumentError("max_tokens: x"), 1);
  EXPECT_EQ(other.message(), "max_tokens: x (prompt[1])");
  EXPECT_EQ(Param(other), "max_tokens");
  EXPECT_EQ(InApiTerms(absl::ResourceExhaustedError("queue: full"), 4).code(),
            absl::StatusCode::kResourceExhausted);
  const Json framing = Json::parse(HttpErrorJson(413, "request body: too large"));
  EXPECT_EQ(framing["error"]["code"], 413);
  EXPECT_EQ(framing["error"]["type"], "invalid_request_error");
  EXPECT_TRUE(framing["error"]["param"].is_null());
}

TEST(OpenAiProtocolTest, ResponseChunksAndUsage) {
  const CompletionHeader h{"cmpl-1", 100, "m"};
  CompletionPiece piece;
  piece.text = "ab";
  piece.token_ids = {5, 6};
  PositionLogprobs lp;
  lp.token = {5, -0.5f, 1};
  lp.top = {{5, -0.5f, 1}, {9, -1.5f, 2}};
  piece.logprobs = {lp, lp};
  auto text = [](int id) { return std::string(1, static_cast<char>('a' + id % 26)); };
  Usage u;
  u.prompt_tokens = 3;
  u.completion_tokens = 2;
  ChoiceFormat all{text, true, true};
  const Json full =
      Json::parse(CompletionJson(h, all, {CompletionChoice{0, piece, "length", 0}}, u));
  EXPECT_EQ(full["object"], "text_completion");
  EXPECT_EQ(full["choices"][0]["index"], 0);
  EXPECT_EQ(full["choices"][0]["text"], "ab");
  EXPECT_EQ(full["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(full["choices"][0]["token_ids"], Json({5, 6}));
  EXPECT_EQ(full["choices"][0]["logprobs"]["tokens"], Json({"f", "f"}));
  EXPECT_EQ(full["choices"][0]["logprobs"]["top_logprobs"][0].size(), 2u);
  EXPECT_EQ(full["choices"][0]["logprobs"]["text_offset"], Json({0, 1}));
  EXPECT_EQ(full["usage"]["total_tokens"], 5);

  const ChoiceFormat plain{text, false, false};
  const std::string chunk =
      CompletionChunkEvent(h, plain, CompletionChoice{2, piece, "", 0}, /*include_usage=*/true);
  ASSERT_EQ(chunk.rfind("data: ", 0), 0u);
  ASSERT_EQ(chunk.substr(chunk.size() - 2), "\n\n");
  const Json c = Json::parse(chunk.substr(6));
  EXPECT_EQ(c["choices"][0]["index"], 2);  // the prompt's choice
  EXPECT_TRUE(c["choices"][0]["finish_reason"].is_null());
  EXPECT_FALSE(c["choices"][0].contains("token_ids"));
  EXPECT_TRUE(c["choices"][0]["logprobs"].is_null());
  EXPECT_TRUE(c["usage"].is_null());  // present, null, until the usage chunk
  const Json usage = Json::parse(UsageChunkEvent(h, u).substr(6));
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["completion_tokens"], 2);
  // Byte tokens that are not UTF-8 do not break the JSON.
  piece.text = "ok";
  auto bad = [](int) { return std::string("\xFF"); };
  EXPECT_NO_THROW(Json::parse(
      CompletionJson(h, {bad, true, false}, {CompletionChoice{0, piece, "stop", 0}}, u)));
  // Several choices: in the order given, each with its index, its text offsets its own.
  CompletionPiece second = piece;
  second.text = "xyz";
  const Json two = Json::parse(CompletionJson(
      h, all, {CompletionChoice{0, piece, "length", 0}, CompletionChoice{1, second, "stop", 5}},
      u));
  ASSERT_EQ(two["choices"].size(), 2u);
  EXPECT_EQ(two["choices"][1]["index"], 1);
  EXPECT_EQ(two["choices"][1]["text"], "xyz");
  EXPECT_EQ(two["choices"][1]["finish_reason"], "stop");
  EXPECT_EQ(two["choices"][1]["logprobs"]["text_offset"], Json({5, 6}));
  EXPECT_EQ(two["usage"]["total_tokens"], 5);
}

TEST(OpenAiProtocolTest, ModelsListsTheOneModel) {
  const Json m = Json::parse(ModelsJson("small", 7, 4096));
  ASSERT_EQ(m["data"].size(), 1u);
  EXPECT_EQ(m["data"][0]["id"], "small");
  EXPECT_EQ(m["data"][0]["max_model_len"], 4096);
}

// A chat body: messages (string or text parts), max_completion_tokens over max_tokens, logprobs
// as a bool with top_logprobs, the completion fields shared; what Saturn cannot render refused
// by name.
TEST(OpenAiProtocolTest, ChatRequestTakesMessagesAndTheSharedFields) {
  absl::StatusOr<ChatRequest> r = ParseChatRequest(R"({
      "model": "m", "messages": [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}],
      "max_tokens": 5, "max_completion_tokens": 7, "temperature": 0, "seed": 3,
      "logprobs": true, "top_logprobs": 2, "stop": "x", "stream": true,
      "stream_options": {"include_usage": true}})");
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->messages.size(), 2u);
  EXPECT_EQ(r->messages[0].role, "system");
  EXPECT_EQ(r->messages[1].content, "a\nb");  // text parts joined by newlines, as vLLM
  EXPECT_TRUE(r->add_generation_prompt);
  ASSERT_EQ(r->completion.requests.size(), 1u);
  const v1::GenerateRequest& g = r->completion.requests[0];
  EXPECT_EQ(g.max_tokens(), 7);
  EXPECT_EQ(g.temperature(), 0);
  EXPECT_EQ(g.seed(), 3);
  EXPECT_EQ(g.logprobs(), 2);
  EXPECT_TRUE(g.prompt_text().empty() && g.prompt_token_ids().empty());  // rendered later
  EXPECT_EQ(r->completion.stop, std::vector<std::string>{"x"});
  EXPECT_TRUE(r->completion.stream && r->completion.include_usage);

  auto error = [](const std::string& body) {
    absl::StatusOr<ChatRequest> bad = ParseChatRequest(body);
    EXPECT_FALSE(bad.ok()) << body;
    EXPECT_EQ(HttpStatus(bad.status()), 400);
    return std::string(bad.status().message());
  };
  EXPECT_THAT(error(R"({"messages": []})"), ::testing::StartsWith("messages: required"));
  EXPECT_THAT(error(R"({"prompt": "x"})"), ::testing::StartsWith("messages: required"));
  EXPECT_THAT(error(R"({"messages": [{"content": "x"}]})"),
              ::testing::StartsWith("messages[0].role: required"));
  EXPECT_THAT(error(R"({"messages": [{"role": "user"}]})"),
              ::testing::StartsWith("messages[0].content: required"));
  EXPECT_THAT(error(R"({"messages": [{"role": "user", "content": [{"type": "image_url",
                  "image_url": {"url": "x"}}]}]})"),
              ::testing::StartsWith("messages[0].content[0]: only"));
  EXPECT_THAT(error(R"({"messages": [{"role": "user", "content": "x"}],
                  "tools": [{"type": "function"}]})"),
              ::testing::StartsWith("tools: not supported"));
  EXPECT_THAT(error(R"({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2})"),
              ::testing::StartsWith("top_logprobs: allowed only with"));
  EXPECT_THAT(error(R"({"messages": [{"role": "user", "content": "x"}], "n": 2})"),
              ::testing::StartsWith("n: only 1"));
  // An empty tools list is what some SDKs send by default: not a request for tools.
  EXPECT_TRUE(
      ParseChatRequest(R"({"messages": [{"role": "user", "content": "x"}], "tools": []})").ok());
}

// Chat completions answer as OpenAI does: a message of role assistant, or chunks whose first
// delta carries the role; logprobs as {"content": [{token, logprob, bytes, top_logprobs}]}.
TEST(OpenAiProtocolTest, ChatResponsesAreMessagesAndDeltas) {
  const CompletionHeader h{"chatcmpl-1", 5, "m", /*chat=*/true};
  ChoiceFormat f;
  f.with_logprobs = true;
  f.token_text = [](int id) { return id == 1 ? std::string("\xc3") : std::string("b"); };
  CompletionChoice c;
  c.piece.text = "hi";
  c.piece.logprobs.push_back(PositionLogprobs{{1, -0.5f, 1}, {{1, -0.5f, 1}, {2, -1.5f, 2}}});
  c.finish_reason = "stop";
  const Json whole = Json::parse(CompletionJson(h, f, {c}, Usage{3, 1, 0}));
  EXPECT_EQ(whole["object"], "chat.completion");
  EXPECT_EQ(whole["choices"][0]["message"], Json({{"role", "assistant"}, {"content", "hi"}}));
  EXPECT_FALSE(whole["choices"][0].contains("text"));
  const Json& lp = whole["choices"][0]["logprobs"]["content"][0];
  EXPECT_EQ(lp["logprob"], -0.5);
  EXPECT_EQ(lp["bytes"], Json({0xc3}));  // unsigned bytes of a partial character
  EXPECT_EQ(lp["top_logprobs"][1]["token"], "b");
  c.first = true;
  c.finish_reason = "";
  auto chunk = [&](const CompletionChoice& x) {
    const std::string e = CompletionChunkEvent(h, f, x, false);
    return Json::parse(e.substr(6));  // after "data: "
  };
  const Json first = chunk(c);
  EXPECT_EQ(first["object"], "chat.completion.chunk");
  EXPECT_EQ(first["choices"][0]["delta"], Json({{"role", "assistant"}, {"content", "hi"}}));
  EXPECT_TRUE(first["choices"][0]["finish_reason"].is_null());
  c.first = false;
  c.piece.text.clear();
  c.finish_reason = "length";
  const Json last = chunk(c);
  EXPECT_EQ(last["choices"][0]["delta"], Json::object());
  EXPECT_EQ(last["choices"][0]["finish_reason"], "length");
}

}  // namespace
}  // namespace saturn
