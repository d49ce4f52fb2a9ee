// /v1/chat/completions against a real in-process server (tiny model, CPU, its byte tokenizer)
// started with --chat_template: the messages rendered by the template and encoded without added
// special tokens give the prompt, and the answer is the completion those ids give; OpenAI's
// chat shapes whole and streamed; the template's own refusal (raise_exception) is the request's
// 400; a preset without a template refuses by name (openai_http_test.cc).
#include <gtest/gtest.h>
#include <httplib.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/server/server_test_util.h"

namespace saturn::testing {
namespace {

using Json = nlohmann::json;

constexpr char kTemplate[] =
    "{% for m in messages %}"
    "{% if m.role == 'bad' %}{{ raise_exception('roles must be system, user or assistant') }}"
    "{% endif %}<|{{ m.role }}|>{{ m.content | trim }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}";

ServerConfig ChatConfig() {
  ServerConfig c = TinyConfig();
  c.http_port = -1;
  const std::string path =
      (std::filesystem::path(::testing::TempDir()) / "openai_chat_test.jinja").string();
  std::ofstream(path) << kTemplate;
  c.chat_template = path;
  return c;
}

using OpenAiChatTest = SharedServerTestWith<ChatConfig>;

Json Post(const ServerApp& app, const std::string& path, const Json& body, int* status) {
  httplib::Client cli("127.0.0.1", app.http_port());
  cli.set_read_timeout(60, 0);
  httplib::Result r = cli.Post(path, body.dump(), "application/json");
  EXPECT_TRUE(r) << httplib::to_string(r.error());
  if (!r) return Json();
  *status = r->status;
  return r->body.rfind("data: ", 0) == 0 ? Json(r->body) : Json::parse(r->body);
}

const Json kMessages = {{{"role", "system"}, {"content", "be brief "}},
                        {{"role", "user"}, {"content", "hi"}}};
// What the template renders for kMessages, and its byte tokenizer ids (3 + byte, no BOS).
const std::string kRendered = "<|system|>be brief\n<|user|>hi\n<|assistant|>";
std::vector<int> RenderedIds() {
  std::vector<int> ids;
  for (unsigned char c : kRendered) ids.push_back(3 + c);
  return ids;
}

TEST_F(OpenAiChatTest, TheRenderedMessagesAreThePrompt) {
  int status = 0;
  const Json chat = Post(*server_->app, "/v1/chat/completions",
                         {{"messages", kMessages},
                          {"max_completion_tokens", 10},
                          {"temperature", 0},
                          {"ignore_eos", true},
                          {"return_token_ids", true}},
                         &status);
  ASSERT_EQ(status, 200) << chat.dump();
  EXPECT_EQ(chat["object"], "chat.completion");
  EXPECT_EQ(chat["id"].get<std::string>().rfind("chatcmpl-", 0), 0u) << chat["id"];
  EXPECT_EQ(chat["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(chat["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(chat["usage"]["prompt_tokens"], static_cast<int>(kRendered.size()));
  EXPECT_EQ(chat["usage"]["completion_tokens"], 10);
  // The same ids sent to /v1/completions give the same tokens and text.
  const Json plain = Post(*server_->app, "/v1/completions",
                          {{"prompt", RenderedIds()},
                           {"max_tokens", 10},
                           {"temperature", 0},
                           {"ignore_eos", true},
                           {"return_token_ids", true}},
                          &status);
  ASSERT_EQ(status, 200) << plain.dump();
  EXPECT_EQ(chat["choices"][0]["token_ids"], plain["choices"][0]["token_ids"]);
  EXPECT_EQ(chat["choices"][0]["message"]["content"], plain["choices"][0]["text"]);
}

TEST_F(OpenAiChatTest, StreamedChunksCarryTheRoleFirstThenDeltas) {
  int status = 0;
  const Json whole =
      Post(*server_->app, "/v1/chat/completions",
           {{"messages", kMessages}, {"max_tokens", 12}, {"temperature", 0}, {"ignore_eos", true}},
           &status);
  ASSERT_EQ(status, 200) << whole.dump();
  const Json raw = Post(*server_->app, "/v1/chat/completions",
                        {{"messages", kMessages},
                         {"max_tokens", 12},
                         {"temperature", 0},
                         {"ignore_eos", true},
                         {"stream", true},
                         {"stream_options", {{"include_usage", true}}}},
                        &status);
  ASSERT_EQ(status, 200);
  const std::string body = raw.get<std::string>();
  std::vector<Json> chunks;
  size_t pos = 0;
  bool done = false;
  while (pos < body.size()) {
    size_t end = body.find("\n\n", pos);
    if (end == std::string::npos) end = body.size();
    const std::string event = body.substr(pos, end - pos);
    pos = end + 2;
    if (event.rfind("data: ", 0) != 0) continue;
    if (event == "data: [DONE]") {
      done = true;
      continue;
    }
    chunks.push_back(Json::parse(event.substr(6)));
  }
  EXPECT_TRUE(done);
  ASSERT_GE(chunks.size(), 3u);
  std::string content;
  for (size_t i = 0; i + 1 < chunks.size(); ++i) {
    const Json& c = chunks[i];
    EXPECT_EQ(c["object"], "chat.completion.chunk");
    const Json& delta = c["choices"][0]["delta"];
    EXPECT_EQ(delta.contains("role"), i == 0) << c.dump();
    if (delta.contains("content")) content += delta["content"].get<std::string>();
  }
  EXPECT_EQ(chunks[chunks.size() - 2]["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(content, whole["choices"][0]["message"]["content"]);
  EXPECT_TRUE(chunks.back()["choices"].empty());  // the usage chunk
  EXPECT_EQ(chunks.back()["usage"]["completion_tokens"], 12);
}

TEST_F(OpenAiChatTest, TheTemplatesRefusalAndBadMessagesAre400) {
  int status = 0;
  Json r = Post(*server_->app, "/v1/chat/completions",
                {{"messages", {{{"role", "bad"}, {"content", "x"}}}}}, &status);
  EXPECT_EQ(status, 400);
  EXPECT_NE(r["error"]["message"].get<std::string>().find("roles must be system, user or "
                                                          "assistant"),
            std::string::npos)
      << r.dump();
  EXPECT_EQ(r["error"]["param"], "messages");
  r = Post(*server_->app, "/v1/chat/completions", {{"messages", Json::array()}}, &status);
  EXPECT_EQ(status, 400);
  EXPECT_EQ(r["error"]["param"], "messages");
  r = Post(*server_->app, "/v1/chat/completions", {{"messages", kMessages}, {"model", "other"}},
           &status);
  EXPECT_EQ(status, 404);
  EXPECT_TRUE(WaitForKvFree(*server_->engine()));
}

}  // namespace
}  // namespace saturn::testing
