// The OpenAI-compatible HTTP API against a real in-process server (tiny model, CPU), through
// cpp-httplib's client: the same tokens as gRPC Generate, streams and their framing, stop
// strings, errors by field, auth, overload, and a client that disconnects.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <functional>
#include <future>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/server/server_test_util.h"

namespace saturn::testing {
namespace {

using Json = nlohmann::json;

ServerConfig HttpConfig() {
  ServerConfig c = TinyConfig();
  c.http_port = -1;
  c.metrics_port = -1;
  return c;
}

// One series' value on /metrics ("name{labels} value"), 0 while it is absent.
double Metric(int port, const std::string& series) {
  httplib::Client cli("127.0.0.1", port);
  cli.set_read_timeout(60, 0);
  httplib::Result r = cli.Get("/metrics");
  EXPECT_TRUE(r) << httplib::to_string(r.error());
  if (!r) return -1;
  const size_t at = r->body.find("\n" + series + " ");
  return at == std::string::npos ? 0 : std::stod(r->body.substr(at + series.size() + 2));
}

// Polls `series` until it reaches `want` (the engine's event thread records a request's end
// after its response is out); returns the last value.
double WaitForMetric(int port, const std::string& series, double want) {
  double v = Metric(port, series);
  for (int i = 0; i < 600 && v < want; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    v = Metric(port, series);
  }
  return v;
}

const std::string kStopped = "saturn:request_success_total{finished_reason=\"stop\"}";
const std::string kAborted = "saturn:request_success_total{finished_reason=\"abort\"}";
const std::string kLength = "saturn:request_success_total{finished_reason=\"length\"}";

std::unique_ptr<httplib::Client> Client(const ServerApp& app) {
  auto cli = std::make_unique<httplib::Client>("127.0.0.1", app.http_port());
  cli->set_read_timeout(60, 0);
  return cli;
}

// The `data:` payloads of a server-sent event stream, in order.
std::vector<std::string> Events(const std::string& body) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos < body.size()) {
    size_t end = body.find("\n\n", pos);
    if (end == std::string::npos) end = body.size();
    const std::string event = body.substr(pos, end - pos);
    if (event.rfind("data: ", 0) == 0) out.push_back(event.substr(6));
    pos = end + 2;
  }
  return out;
}

Json Completion(httplib::Client& cli, const Json& body, int* status = nullptr) {
  httplib::Result r = cli.Post("/v1/completions", body.dump(), "application/json");
  EXPECT_TRUE(r) << httplib::to_string(r.error());
  if (!r) return Json();
  if (status != nullptr) *status = r->status;
  return Json::parse(r->body);
}

// A long greedy stream (500 tokens, EOS ignored) read until `keep_reading(bytes so far)` says
// stop; the client then drops the connection. Returns whether the response ended by itself.
bool StreamUntil(int port, const std::function<bool(const std::string&)>& keep_reading,
                 const Json& prompt = {1, 2, 3}) {
  httplib::Client cli("127.0.0.1", port);
  cli.set_read_timeout(60, 0);
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.set_header("Content-Type", "application/json");
  req.body = Json({{"prompt", prompt}, {"max_tokens", 500}, {"ignore_eos", true}, {"stream", true}})
                 .dump();
  std::string got;
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    got.append(data, n);
    return keep_reading(got);
  };
  httplib::Response res;
  httplib::Error error = httplib::Error::Success;
  return cli.send(req, res, error);
}

using OpenAiHttpTest = SharedServerTestWith<HttpConfig>;

TEST_F(OpenAiHttpTest, GreedyCompletionGivesGenerateTokens) {
  const std::vector<int> prompt = {1, 17, 42, 99};
  StreamResult grpc = RunStream(server_->stub.get(), IdsRequest(prompt, 12));
  ASSERT_TRUE(grpc.status.ok()) << grpc.status.error_message();
  auto cli = Client(*server_->app);
  int status = 0;
  const Json r = Completion(*cli,
                            {{"model", "tiny"},
                             {"prompt", prompt},
                             {"max_tokens", 12},
                             {"temperature", 0},
                             {"ignore_eos", true},
                             {"return_token_ids", true}},
                            &status);
  ASSERT_EQ(status, 200) << r.dump();
  EXPECT_EQ(r["object"], "text_completion");
  EXPECT_EQ(r["model"], "tiny");
  EXPECT_EQ(r["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(r["choices"][0]["token_ids"].get<std::vector<int>>(), grpc.tokens);
  EXPECT_EQ(r["usage"]["prompt_tokens"], 4);
  EXPECT_EQ(r["usage"]["completion_tokens"], 12);
  EXPECT_EQ(r["usage"]["total_tokens"], 16);
}

TEST_F(OpenAiHttpTest, StreamIsServerSentEventsEndingInDone) {
  auto cli = Client(*server_->app);
  const Json body = {{"prompt", {3, 4, 5}},
                     {"max_tokens", 9},
                     {"temperature", 0},
                     {"ignore_eos", true},
                     {"stream", true},
                     {"return_token_ids", true},
                     {"stream_options", {{"include_usage", true}}},
                     {"logprobs", 1}};
  httplib::Result r = cli->Post("/v1/completions", body.dump(), "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(r->get_header_value("Content-Type").rfind("text/event-stream", 0), 0u);
  const std::vector<std::string> events = Events(r->body);
  ASSERT_GE(events.size(), 3u);
  EXPECT_EQ(events.back(), "[DONE]");
  std::vector<int> tokens;
  int logprobs = 0;
  std::string finish;
  for (size_t i = 0; i + 2 < events.size(); ++i) {
    const Json c = Json::parse(events[i]);
    EXPECT_TRUE(c["usage"].is_null());
    ASSERT_EQ(c["choices"].size(), 1u);
    for (int t : c["choices"][0]["token_ids"]) tokens.push_back(t);
    logprobs += static_cast<int>(c["choices"][0]["logprobs"]["token_logprobs"].size());
    if (!c["choices"][0]["finish_reason"].is_null()) finish = c["choices"][0]["finish_reason"];
  }
  EXPECT_EQ(finish, "length");
  EXPECT_EQ(tokens.size(), 9u);
  EXPECT_EQ(logprobs, 9);
  const Json usage = Json::parse(events[events.size() - 2]);
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["completion_tokens"], 9);
  StreamResult grpc = RunStream(server_->stub.get(), IdsRequest({3, 4, 5}, 9));
  EXPECT_EQ(tokens, grpc.tokens);
}

TEST_F(OpenAiHttpTest, StopStringEndsTheTextBeforeIt) {
  auto cli = Client(*server_->app);
  // Sampled with a fixed seed (the same tokens every time): the tiny random model's greedy
  // choices are mostly ids without text.
  const Json base = {{"prompt", "Once upon a time"},
                     {"max_tokens", 300},
                     {"temperature", 1},
                     {"seed", 7},
                     {"ignore_eos", true}};
  const Json plain = Completion(*cli, base);
  const std::string text = plain["choices"][0]["text"];
  // The stop: the text's second character (whole UTF-8 sequence).
  size_t start = 0;
  do ++start;
  while (start < text.size() && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80);
  size_t end = start + 1;
  while (end < text.size() && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) ++end;
  if (end > text.size()) GTEST_SKIP() << "the random model's text is under two characters";
  const std::string stop = text.substr(start, end - start);
  Json with_stop = base;
  with_stop["stop"] = {stop};
  const int metrics = server_->app->metrics_port();
  const double stopped = Metric(metrics, kStopped), aborted = Metric(metrics, kAborted);
  int status = 0;
  const Json r = Completion(*cli, with_stop, &status);
  ASSERT_EQ(status, 200) << r.dump();
  EXPECT_EQ(r["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(r["choices"][0]["text"], text.substr(0, text.find(stop)));
  EXPECT_LT(r["usage"]["completion_tokens"].get<int>(), 300);
  EXPECT_TRUE(WaitForKvFree(*server_->engine()));
  // Metrics count it as stopped, like an engine-side stop, not as aborted.
  EXPECT_EQ(WaitForMetric(metrics, kStopped, stopped + 1), stopped + 1);
  EXPECT_EQ(Metric(metrics, kAborted), aborted);
}

TEST_F(OpenAiHttpTest, BadRequestsNameTheField) {
  auto cli = Client(*server_->app);
  struct Case {
    Json body;
    int status;
    std::string param;
  };
  for (const Case& c : std::vector<Case>{
           {{{"prompt", {1, 2}}, {"max_tokens", 0}}, 400, "max_tokens"},
           {{{"prompt", {1, 2}}, {"max_tokens", 600}}, 400, "max_tokens"},  // past max_model_len
           {{{"prompt", ""}}, 400, "prompt"},
           {{{"prompt", {""}}}, 400, "prompt[0]"},
           {{{"prompt", std::vector<int>(600, 1)}}, 400, "prompt"},
           {{{"prompt", {1, 5000}}}, 400, "prompt[1]"},
           {{{"prompt", {1, 2}}, {"n", 3}}, 400, "n"},
           {{{"prompt", {1, 2}}, {"echo", true}}, 400, "echo"},
           {{{"prompt", {1, 2}}, {"temperature", -1}}, 400, "temperature"},
           {{{"prompt", {1, 2}}, {"model", "gpt-4"}}, 404, ""}}) {
    int status = 0;
    const Json r = Completion(*cli, c.body, &status);
    EXPECT_EQ(status, c.status) << c.body.dump() << " -> " << r.dump();
    ASSERT_TRUE(r.contains("error")) << r.dump();
    EXPECT_FALSE(r["error"]["message"].get<std::string>().empty());
    if (!c.param.empty()) EXPECT_EQ(r["error"]["param"], c.param) << r.dump();
  }
  httplib::Result bad = cli->Post("/v1/completions", "{", "application/json");
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 400);
  httplib::Result chat =
      cli->Post("/v1/chat/completions", R"({"messages":[{"role":"user","content":"hi"}]})",
                "application/json");
  ASSERT_TRUE(chat);
  EXPECT_EQ(chat->status, 400);
  EXPECT_NE(chat->body.find("chat template"), std::string::npos) << chat->body;
  // What httplib refuses before the API sees it still gets OpenAI's error shape.
  httplib::Result nowhere = cli->Get("/v2/nothing");
  ASSERT_TRUE(nowhere);
  EXPECT_EQ(nowhere->status, 404);
  EXPECT_NE(Json::parse(nowhere->body)["error"]["message"].get<std::string>().find("/v2/nothing"),
            std::string::npos)
      << nowhere->body;
  // curl -d's content type caps a body at 8 KiB in httplib: the message says what to send.
  const std::string form = Json({{"prompt", std::vector<int>(5000, 1)}, {"max_tokens", 1}}).dump();
  ASSERT_GT(form.size(), 8192u);
  httplib::Result big = cli->Post("/v1/completions", form, "application/x-www-form-urlencoded");
  ASSERT_TRUE(big);
  EXPECT_EQ(big->status, 413);
  const Json big_error = Json::parse(big->body)["error"];
  EXPECT_EQ(big_error["code"], 413);
  EXPECT_NE(big_error["message"].get<std::string>().find("Content-Type: application/json"),
            std::string::npos)
      << big->body;
  EXPECT_TRUE(WaitForKvFree(*server_->engine()));
}

TEST_F(OpenAiHttpTest, ModelsAndHealth) {
  auto cli = Client(*server_->app);
  httplib::Result health = cli->Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  httplib::Result models = cli->Get("/v1/models");
  ASSERT_TRUE(models);
  const Json m = Json::parse(models->body);
  EXPECT_EQ(m["data"][0]["id"], "tiny");
  EXPECT_EQ(m["data"][0]["max_model_len"], 512);
}

// Many clients connecting at the same moment (saturn-load --concurrency 40 --api openai at
// start) are all answered: Debian's cpp-httplib listens with a backlog of 5, and connections
// the kernel dropped from a full accept queue failed on the client ("Read") a second later.
TEST_F(OpenAiHttpTest, ABurstOfConnectionsIsEveryOneAnswered) {
  constexpr int kClients = 96;
  const int port = server_->app->http_port();
  std::atomic<int> ready{0}, answered{0};
  std::vector<std::thread> clients;
  for (int i = 0; i < kClients; ++i) {
    clients.emplace_back([&] {
      httplib::Client cli("127.0.0.1", port);
      cli.set_connection_timeout(30);
      cli.set_read_timeout(30);
      ++ready;
      while (ready.load() < kClients) std::this_thread::yield();
      httplib::Result r = cli.Get("/health");
      if (r && r->status == 200) ++answered;
    });
  }
  for (std::thread& t : clients) t.join();
  EXPECT_EQ(answered.load(), kClients);
}

TEST_F(OpenAiHttpTest, ClientThatDisconnectsMidStreamFreesItsKvBlocks) {
  auto cli = Client(*server_->app);
  bool got_event = false;
  EXPECT_FALSE(StreamUntil(server_->app->http_port(), [&](const std::string& got) {
    got_event = got.find("data: {") != std::string::npos;
    return !got_event;  // stop reading after the first event
  }));                  // the client cancelled
  ASSERT_TRUE(got_event);
  EXPECT_TRUE(WaitForKvFree(*server_->engine()));
  // The server keeps serving.
  int status = 0;
  Completion(*cli, {{"prompt", {1}}, {"max_tokens", 2}}, &status);
  EXPECT_EQ(status, 200);
}

// A list of prompts: one choice per prompt, by index, each the tokens gRPC Generate gives its
// prompt; usage sums them all.
TEST_F(OpenAiHttpTest, ListOfPromptsGivesOneChoicePerPromptInOrder) {
  const std::vector<std::vector<int>> prompts = {{1, 17, 42}, {5, 6}, {9, 9, 9, 9}};
  auto cli = Client(*server_->app);
  int status = 0;
  const Json r = Completion(*cli,
                            {{"prompt", prompts},
                             {"max_tokens", 6},
                             {"temperature", 0},
                             {"ignore_eos", true},
                             {"return_token_ids", true}},
                            &status);
  ASSERT_EQ(status, 200) << r.dump();
  ASSERT_EQ(r["choices"].size(), 3u) << r.dump();
  for (size_t i = 0; i < prompts.size(); ++i) {
    const Json& c = r["choices"][i];
    EXPECT_EQ(c["index"], i);
    EXPECT_EQ(c["finish_reason"], "length");
    StreamResult grpc = RunStream(server_->stub.get(), IdsRequest(prompts[i], 6));
    ASSERT_TRUE(grpc.status.ok()) << grpc.status.error_message();
    EXPECT_EQ(c["token_ids"].get<std::vector<int>>(), grpc.tokens) << i;
  }
  EXPECT_EQ(r["usage"]["prompt_tokens"], 9);
  EXPECT_EQ(r["usage"]["completion_tokens"], 18);
  EXPECT_EQ(r["usage"]["total_tokens"], 27);
  // Text prompts likewise, each its own choice.
  const Json t = Completion(
      *cli, {{"prompt", {"Hello", "Once upon a time"}}, {"max_tokens", 3}, {"ignore_eos", true}},
      &status);
  ASSERT_EQ(status, 200) << t.dump();
  ASSERT_EQ(t["choices"].size(), 2u);
  EXPECT_EQ(t["choices"][1]["index"], 1);
  EXPECT_EQ(t["usage"]["completion_tokens"], 6);
  EXPECT_TRUE(WaitForKvFree(*server_->engine()));
}

TEST_F(OpenAiHttpTest, ListOfPromptsStreamsChunksThatNameTheirChoice) {
  const std::vector<std::vector<int>> prompts = {{3, 4, 5}, {7}, {11, 12}};
  auto cli = Client(*server_->app);
  const Json body = {{"prompt", prompts},
                     {"max_tokens", 8},
                     {"temperature", 0},
                     {"ignore_eos", true},
                     {"stream", true},
                     {"return_token_ids", true},
                     {"stream_options", {{"include_usage", true}}}};
  httplib::Result r = cli->Post("/v1/completions", body.dump(), "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const std::vector<std::string> events = Events(r->body);
  ASSERT_GE(events.size(), 5u);
  EXPECT_EQ(events.back(), "[DONE]");
  EXPECT_EQ(std::count(events.begin(), events.end(), "[DONE]"), 1);
  std::vector<std::vector<int>> tokens(prompts.size());
  std::vector<std::string> finish(prompts.size());
  for (size_t i = 0; i + 2 < events.size(); ++i) {
    const Json c = Json::parse(events[i]);
    EXPECT_TRUE(c["usage"].is_null());
    ASSERT_EQ(c["choices"].size(), 1u);
    const int index = c["choices"][0]["index"];
    ASSERT_TRUE(index >= 0 && index < 3) << events[i];
    EXPECT_TRUE(finish[index].empty()) << "a chunk after choice " << index << "'s last";
    for (int t : c["choices"][0]["token_ids"]) tokens[index].push_back(t);
    if (!c["choices"][0]["finish_reason"].is_null())
      finish[index] = c["choices"][0]["finish_reason"];
  }
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(finish[i], "length") << i;
    EXPECT_EQ(tokens[i], RunStream(server_->stub.get(), IdsRequest(prompts[i], 8)).tokens) << i;
  }
  const Json usage = Json::parse(events[events.size() - 2]);
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["prompt_tokens"], 6);
  EXPECT_EQ(usage["usage"]["completion_tokens"], 24);
}

// A list of prompts has a limit, and an error names the prompt; one that the engine refuses
// after others were submitted cancels them (nothing is left running or holding KV blocks).
TEST_F(OpenAiHttpTest, ListOfPromptsIsBoundedAndAPromptThatFailsEndsTheOthers) {
  auto cli = Client(*server_->app);
  int status = 0;
  Json r = Completion(*cli, {{"prompt", std::vector<std::vector<int>>(65, {1, 2})}}, &status);
  EXPECT_EQ(status, 400);
  EXPECT_EQ(r["error"]["param"], "prompt");
  EXPECT_EQ(r["error"]["message"], "prompt: at most 64 prompts, got 65");
  r = Completion(*cli, {{"prompt", Json::array({Json::array({1, 2}), Json::array()})}}, &status);
  EXPECT_EQ(status, 400);
  EXPECT_EQ(r["error"]["param"], "prompt[1]") << r.dump();
  // Too long for the server's limits: refused before anything is submitted.
  r = Completion(*cli, {{"prompt", {std::vector<int>{1}, std::vector<int>(600, 1)}}}, &status);
  EXPECT_EQ(status, 400);
  EXPECT_EQ(r["error"]["param"], "prompt[1]") << r.dump();
  // Refused by the engine once prompt[0] is in: prompt[0] is cancelled.
  const int metrics = server_->app->metrics_port();
  const double aborted = Metric(metrics, kAborted);
  r = Completion(*cli,
                 {{"prompt", {std::vector<int>{1, 2}, std::vector<int>{1, 5000}}},
                  {"max_tokens", 400},
                  {"ignore_eos", true}},
                 &status);
  EXPECT_EQ(status, 400);
  EXPECT_EQ(r["error"]["param"], "prompt[1][1]") << r.dump();
  r = Completion(*cli,
                 {{"prompt", {std::vector<int>{1, 2}, std::vector<int>(500, 1)}},
                  {"max_tokens", 20},
                  {"ignore_eos", true}},
                 &status);
  EXPECT_EQ(status, 400);
  EXPECT_EQ(r["error"]["param"], "max_tokens") << r.dump();
  EXPECT_NE(r["error"]["message"].get<std::string>().find("(prompt[1])"), std::string::npos)
      << r.dump();
  EXPECT_EQ(WaitForMetric(metrics, kAborted, aborted + 2), aborted + 2);
  EXPECT_TRUE(WaitForKvFree(*server_->engine()));
  EXPECT_EQ(server_->engine()->counters().num_running, 0);
}

TEST_F(OpenAiHttpTest, ClientThatLeavesAListOfPromptsCancelsThemAll) {
  const int metrics = server_->app->metrics_port();
  const double aborted = Metric(metrics, kAborted);
  bool got_event = false;
  EXPECT_FALSE(StreamUntil(
      server_->app->http_port(),
      [&](const std::string& got) {
        got_event = got.find("data: {") != std::string::npos;
        return !got_event;  // leave after the first event
      },
      Json(std::vector<std::vector<int>>{{1, 2, 3}, {4, 5}, {6}})));
  ASSERT_TRUE(got_event);
  EXPECT_EQ(WaitForMetric(metrics, kAborted, aborted + 3), aborted + 3);
  EXPECT_TRUE(WaitForKvFree(*server_->engine()));
  EXPECT_EQ(server_->engine()->counters().num_running, 0);
}

// GET /metrics on the API's port, where vLLM serves it: the same series as --metrics_port.
TEST_F(OpenAiHttpTest, MetricsAreServedOnTheApiPortToo) {
  auto series = [](int port) {
    httplib::Client cli("127.0.0.1", port);
    cli.set_read_timeout(60, 0);
    httplib::Result r = cli.Get("/metrics");
    EXPECT_TRUE(r);
    std::vector<std::string> names;
    if (!r) return names;
    EXPECT_EQ(r->status, 200);
    EXPECT_EQ(r->get_header_value("Content-Type"), "text/plain; version=0.0.4; charset=utf-8");
    size_t at = 0;
    while ((at = r->body.find("# TYPE ", at)) != std::string::npos) {
      at += 7;
      names.push_back(r->body.substr(at, r->body.find(' ', at) - at));
    }
    return names;
  };
  const std::vector<std::string> api = series(server_->app->http_port());
  EXPECT_NE(std::find(api.begin(), api.end(), "saturn:num_requests_running"), api.end());
  EXPECT_NE(std::find(api.begin(), api.end(), "saturn:request_success_total"), api.end());
  EXPECT_EQ(api, series(server_->app->metrics_port()));
  // The same counts: a completion on the API moves both.
  auto cli = Client(*server_->app);
  const double before = Metric(server_->app->http_port(), kLength);
  int status = 0;
  Completion(*cli, {{"prompt", {1}}, {"max_tokens", 2}, {"ignore_eos", true}}, &status);
  ASSERT_EQ(status, 200);
  EXPECT_EQ(WaitForMetric(server_->app->http_port(), kLength, before + 1), before + 1);
  EXPECT_EQ(Metric(server_->app->metrics_port(), kLength), before + 1);
}

// One running sequence and one waiting: the next request is 429, and the running ones finish.
ServerConfig OneSlotConfig() {
  ServerConfig c = HttpConfig();
  c.engine.options.max_num_seqs = 1;
  c.engine.max_queued_requests = 1;
  return c;
}
using OpenAiOverloadTest = SharedServerTestWith<OneSlotConfig>;

TEST_F(OpenAiOverloadTest, FullQueueIs429) {
  Engine* engine = server_->engine();
  std::atomic<bool> release{false};
  std::promise<void> first_event;
  std::thread running([&] {
    bool signalled = false;
    StreamUntil(server_->app->http_port(), [&](const std::string&) {
      if (!signalled) first_event.set_value();
      signalled = true;
      return !release.load();  // disconnect once released
    });
  });
  first_event.get_future().wait();
  std::future<int> waiting = std::async(std::launch::async, [&] {
    auto cli = Client(*server_->app);
    int status = 0;
    Completion(*cli, {{"prompt", {3}}, {"max_tokens", 2}}, &status);
    return status;
  });
  for (int i = 0; i < 6000 && engine->counters().num_waiting < 1; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_EQ(engine->counters().num_waiting, 1);
  auto cli = Client(*server_->app);
  int status = 0;
  const Json r = Completion(*cli, {{"prompt", {4}}, {"max_tokens", 2}}, &status);
  EXPECT_EQ(status, 429) << r.dump();
  EXPECT_EQ(r["error"]["type"], "rate_limit_error");
  release = true;
  running.join();
  EXPECT_EQ(waiting.get(), 200);
  EXPECT_TRUE(WaitForKvFree(*engine));
}

// Tokens arriving faster than the client check once kept a non-streamed request whose client
// had left running to max_tokens: the check only ran after a check interval without tokens.
ServerConfig QuickClientCheckConfig() {
  ServerConfig c = HttpConfig();
  c.http_client_check = absl::Milliseconds(20);
  return c;
}

TEST(OpenAiHttpClientCheckTest, ClientThatLeavesANonStreamedRequestCancelsIt) {
  auto s = StartServer(QuickClientCheckConfig());
  ASSERT_NE(s, nullptr);
  const int metrics = s->app->metrics_port();
  // A raw connection: send the request, wait past a few checks, close without reading.
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(s->app->http_port()));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  const std::string body =
      Json({{"prompt", {1, 2, 3}}, {"max_tokens", 509}, {"ignore_eos", true}}).dump();
  const std::string request = absl::StrCat(
      "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
      "application/json\r\nContent-Length: ",
      body.size(), "\r\n\r\n", body);
  ASSERT_EQ(::send(fd, request.data(), request.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(request.size()));
  std::this_thread::sleep_for(std::chrono::milliseconds(60));
  ::close(fd);
  // The request ends as aborted, not at max_tokens.
  for (int i = 0; i < 600 && Metric(metrics, kAborted) + Metric(metrics, kLength) < 1; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  if (Metric(metrics, kLength) == 1) {
    const double e2e = Metric(metrics, "saturn:e2e_request_latency_seconds_sum");
    if (e2e < 0.06) GTEST_SKIP() << "509 tokens took " << e2e << " s: done before the client left";
    FAIL() << "the request ran to max_tokens (" << e2e << " s) after its client left at 60 ms";
  }
  EXPECT_EQ(Metric(metrics, kAborted), 1);
  EXPECT_LT(Metric(metrics, "saturn:generation_tokens_total"), 509);
  EXPECT_TRUE(WaitForKvFree(*s->engine()));
}

// A draining server answers new requests 503 (and /health 503) while a stream in flight runs
// on; the stream's client leaving lets the shutdown finish.
TEST(OpenAiHttpDrainTest, NewRequestsAre503WhileDraining) {
  std::unique_ptr<TestServer> s = StartServer(HttpConfig());
  ASSERT_NE(s, nullptr);
  const int port = s->app->http_port();
  std::atomic<bool> leave{false};
  std::promise<void> streaming;
  std::thread stream([&] {
    bool signalled = false;
    StreamUntil(port, [&](const std::string&) {
      if (!signalled) streaming.set_value();
      signalled = true;
      return !leave.load();
    });
  });
  streaming.get_future().wait();
  std::thread shutdown([&] { s->app->Shutdown(); });
  httplib::Client cli("127.0.0.1", port);
  int status = 0;
  for (int i = 0; i < 2000 && status != 503; ++i) {  // until the drain has begun
    httplib::Result h = cli.Get("/health");
    status = h ? h->status : 0;
    if (status != 503) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(status, 503);
  const Json r = Completion(cli, {{"prompt", {1}}, {"max_tokens", 2}}, &status);
  EXPECT_EQ(status, 503) << r.dump();
  EXPECT_EQ(r["error"]["type"], "service_unavailable");
  leave = true;
  stream.join();
  shutdown.join();
}

// --auth_scope=all: the token guards the HTTP API as it guards every RPC.
TEST(OpenAiHttpAuthTest, WrongOrMissingTokenIs401) {
  const std::string token_file = ::testing::TempDir() + "/openai_token_" + std::to_string(getpid());
  {
    std::FILE* f = std::fopen(token_file.c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fputs("s3cret-token\n", f);
    std::fclose(f);
  }
  ServerConfig c = HttpConfig();
  c.auth_token_file = token_file;
  c.auth_scope = "all";
  std::unique_ptr<TestServer> s = StartServer(c);
  ASSERT_NE(s, nullptr);
  auto cli = Client(*s->app);
  const std::string body = Json({{"prompt", {1}}, {"max_tokens", 2}}).dump();
  httplib::Result none = cli->Post("/v1/completions", body, "application/json");
  ASSERT_TRUE(none);
  EXPECT_EQ(none->status, 401);
  EXPECT_EQ(Json::parse(none->body)["error"]["type"], "authentication_error");
  httplib::Result wrong =
      cli->Post("/v1/completions", {{"Authorization", "Bearer nope"}}, body, "application/json");
  ASSERT_TRUE(wrong);
  EXPECT_EQ(wrong->status, 401);
  httplib::Result right = cli->Post("/v1/completions", {{"Authorization", "Bearer s3cret-token"}},
                                    body, "application/json");
  ASSERT_TRUE(right);
  EXPECT_EQ(right->status, 200) << right->body;
  // /metrics on the API's port too.
  httplib::Result metrics = cli->Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_EQ(metrics->status, 401);
  metrics = cli->Get("/metrics", {{"Authorization", "Bearer s3cret-token"}});
  ASSERT_TRUE(metrics);
  EXPECT_EQ(metrics->status, 200);
  EXPECT_NE(metrics->body.find("saturn:num_requests_running"), std::string::npos);
  std::remove(token_file.c_str());
}

}  // namespace
}  // namespace saturn::testing
