// saturn-load --api openai end to end against a real saturn-server (the built binary, tiny
// model, CPU backend) serving both its gRPC API and its OpenAI-compatible HTTP front
// (--http_port=-1): every request is accounted for and its tokens counted from the stream; the
// diagnosis is skipped with one line unless --diag_target names Saturn's gRPC address;
// --compare api runs the same workload through both fronts and writes the HTTP/gRPC ratios;
// bad targets and rejected requests get a plain message and a non-zero exit.
// Needs the saturn-server and saturn-load targets built.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "clients/load/run_table.h"
#include "clients/load/session.h"
#include "nlohmann/json.hpp"
#include "tests/clients/load/http_server_process.h"
#include "tests/clients/table_figures.h"

namespace saturn::clients {
namespace {

using nlohmann::json;
using testing::kLoadBinary;
using testing::ReadFile;
using testing::ToolRun;

std::string Dir() {
  static const std::string dir = testing::MakeProcessDir("saturn_load_openai_e2e_");
  return dir;
}

ToolRun RunLoad(const std::string& args) {
  return testing::RunTool(kLoadBinary, args + " --progress=false", Dir(), "load");
}

int CountLines(const std::string& text, const std::string& needle) {
  int n = 0;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    if (text.substr(start, end - start).find(needle) != std::string::npos) ++n;
    start = end + 1;
  }
  return n;
}

class LoadOpenAiE2eTest : public testing::SharedServerSuite {
 protected:
  // As StartSharedServer, with the HTTP front on a free port.
  static void SetUpTestSuite() {
    ASSERT_EQ(access(testing::kServerBinary.c_str(), X_OK), 0)
        << "build the saturn-server target: " << testing::kServerBinary;
    ASSERT_EQ(access(kLoadBinary.c_str(), X_OK), 0) << "build the saturn-load target";
    server_ = new testing::Spawned(
        testing::StartServer(Dir() + "/saturn-server.log", {"--http_port=-1"}));
    url_ = testing::WaitForHttpUrl(Dir() + "/saturn-server.log");
  }
  void SetUp() override {
    SharedServerSuite::SetUp();
    ASSERT_FALSE(url_.empty()) << "no \"OpenAI-compatible API at\" line in the server's log:\n"
                               << ReadFile(Dir() + "/saturn-server.log");
  }

  static void ExpectAllCompleted(const json& phase, int sent, int output_len) {
    EXPECT_EQ(phase["sent"], sent) << phase["label"];
    EXPECT_EQ(phase["completed"], sent) << phase["label"];
    EXPECT_EQ(phase["errors"], 0) << phase["label"];
    ASSERT_EQ(phase["requests"].size(), static_cast<size_t>(sent));
    for (const json& r : phase["requests"]) {
      EXPECT_EQ(r["status"], "OK") << r["error"];
      EXPECT_EQ(r["output_tokens"], output_len);  // ignore_eos: exactly max_tokens
      EXPECT_GT(r["prompt_tokens"].get<int>(), 0);
      EXPECT_TRUE(r["ttft_ms"].is_number());
      EXPECT_TRUE(r["tpot_ms"].is_number());
    }
    EXPECT_GT(phase["output_token_throughput"].get<double>(), 0);
  }

  static inline std::string url_;
};

TEST_F(LoadOpenAiE2eTest, OpenAiRunCountsRequestsAndTokensAndSkipsTheDiagnosisInOneLine) {
  const std::string dir = Dir();
  const ToolRun r = RunLoad("--api=openai --target=" + url_ +
                            " --concurrency=2 --num_requests=4 --input_len=8 --output_len=6"
                            " --min_measure_s=0 --json=" +
                            dir + "/openai.json --csv=" + dir + "/openai.csv");
  ASSERT_EQ(r.code, 0) << r.err << r.out;
  const json j = json::parse(ReadFile(dir + "/openai.json"));
  EXPECT_EQ(j["settings"]["api"], "openai");
  ASSERT_EQ(j["phases"].size(), 1u);
  const json& p = j["phases"][0];
  EXPECT_EQ(p["api"], "openai");
  EXPECT_EQ(p["target"], url_);
  ExpectAllCompleted(p, 4, 6);
  EXPECT_EQ(j["http_targets"][0]["model"], "tiny");  // the first id of GET /v1/models
  EXPECT_EQ(j["http_targets"][0]["max_model_len"], 512);
  EXPECT_TRUE(p["diagnosis"].empty());
  EXPECT_FALSE(j["diagnosis_skipped"].get<std::string>().empty());
  EXPECT_EQ(CountLines(r.out + r.err, "skipped"), 1) << r.out << r.err;
  EXPECT_NE(r.out.find("--diag_target"), std::string::npos) << r.out;
  // Every figure of the table is in the JSON, as for the gRPC API.
  const std::set<std::string> in_json = testing::JsonFigures(j);
  for (const std::string& f : testing::TableFigures(r.out)) {
    EXPECT_TRUE(in_json.count(f)) << f << " in\n" << r.out;
  }
  const std::string csv = ReadFile(dir + "/openai.csv");
  EXPECT_NE(csv.find(",openai,"), std::string::npos) << csv;
}

TEST_F(LoadOpenAiE2eTest, DiagTargetBringsSaturnsDiagnosis) {
  LoadConfig c;
  c.api = "openai";
  c.target = {url_};
  c.diag_target = server_->address;
  c.concurrency = {1};
  c.num_requests = 3;
  c.input_len = *ParseLengthSpec("--input_len", "8");
  c.output_len = *ParseLengthSpec("--output_len", "4");
  const SessionResult res = RunSession(c, SessionObserver(), nullptr);
  ASSERT_EQ(res.exit_code, 0) << res.error;
  EXPECT_EQ(LiveStreamCalls(), 0);  // every HTTP call's thread is joined
  EXPECT_TRUE(res.diagnosis_skipped.empty());
  ASSERT_EQ(res.phases.size(), 1u);
  const PhaseReport& p = res.phases[0];
  EXPECT_EQ(p.metrics.completed, p.metrics.sent);
  EXPECT_GE(p.metrics.sent, 3);
  ASSERT_EQ(p.windows.size(), 1u);
  EXPECT_GT(p.windows[0].last_s, 0);
  ASSERT_EQ(p.diagnoses.size(), 1u) << p.diagnosis_note;
  EXPECT_NE(FormatTable(res).find("diagnosis    "), std::string::npos);
  for (const RequestRecord& r : p.outcome.records) {
    EXPECT_EQ(r.output_tokens, 4);
    // return_token_ids (asked of a server known to be Saturn) counts every token of a chunk.
    int chunk_tokens = 0;
    for (int n : r.token_counts) chunk_tokens += n;
    EXPECT_EQ(chunk_tokens, 4);
  }
}

TEST_F(LoadOpenAiE2eTest, CompareApiRunsBothFrontsOnOneWorkload) {
  const std::string dir = Dir();
  const ToolRun r =
      RunLoad("--target=" + server_->address + " --compare=api --openai_target=" + url_ +
              " --concurrency=2 --num_requests=2 --input_len=8 --output_len=5"
              " --min_measure_s=0 --seed=9 --json=" +
              dir + "/compare.json");
  ASSERT_EQ(r.code, 0) << r.err << r.out;
  const json j = json::parse(ReadFile(dir + "/compare.json"));
  ASSERT_EQ(j["phases"].size(), 2u);
  EXPECT_EQ(j["phases"][0]["label"], "c=2 api=grpc");
  EXPECT_EQ(j["phases"][1]["label"], "c=2 api=openai");
  EXPECT_EQ(j["phases"][0]["api"], "grpc");
  EXPECT_EQ(j["phases"][1]["api"], "openai");
  ExpectAllCompleted(j["phases"][0], 2, 5);
  ExpectAllCompleted(j["phases"][1], 2, 5);
  // The same workload: the same prompts, so the same prompt lengths, request by request.
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(j["phases"][0]["requests"][i]["prompt_tokens"],
              j["phases"][1]["requests"][i]["prompt_tokens"]);
  }
  ASSERT_EQ(j["comparison"].size(), 1u);
  const json& cmp = j["comparison"][0];
  EXPECT_EQ(cmp["kind"], "api");
  const double grpc_tpot = j["phases"][0]["tpot_ms"]["p50"].get<double>();
  const double http_tpot = j["phases"][1]["tpot_ms"]["p50"].get<double>();
  ASSERT_GT(grpc_tpot, 0);
  EXPECT_DOUBLE_EQ(cmp["tpot_p50_ratio"].get<double>(), http_tpot / grpc_tpot);
  EXPECT_DOUBLE_EQ(cmp["output_token_throughput_ratio"].get<double>(),
                   j["phases"][1]["output_token_throughput"].get<double>() /
                       j["phases"][0]["output_token_throughput"].get<double>());
  // Both phases were diagnosed by the gRPC target; the table shows the ratios.
  EXPECT_EQ(j["phases"][0]["diagnosis"].size(), 1u);
  EXPECT_EQ(j["phases"][1]["diagnosis"].size(), 1u) << j["phases"][1]["diagnosis_note"];
  EXPECT_NE(r.out.find("== API: c=2 api=grpc vs c=2 api=openai =="), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("HTTP/gRPC    TPOT p50 "), std::string::npos) << r.out;
  const std::set<std::string> in_json = testing::JsonFigures(j);
  for (const std::string& f : testing::TableFigures(r.out)) {
    EXPECT_TRUE(in_json.count(f)) << f << " in\n" << r.out;
  }
}

TEST_F(LoadOpenAiE2eTest, RejectedRequestGetsTheServersMessage) {
  const std::string dir = Dir();
  std::string too_long = "{\"prompt_token_ids\": [3";
  for (int i = 0; i < 600; ++i) too_long += ", 3";
  too_long += "], \"max_tokens\": 4}";
  std::ofstream(dir + "/rejected.jsonl") << "{\"input_len\": 5, \"max_tokens\": 3}\n"
                                         << too_long << "\n";
  const ToolRun r =
      RunLoad("--api=openai --target=" + url_ + " --prompts=" + dir +
              "/rejected.jsonl --concurrency=1 --num_requests=10 --json=" + dir + "/rejected.json");
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_NE(r.err.find("HTTP_400"), std::string::npos) << r.err;
  const json j = json::parse(ReadFile(dir + "/rejected.json"));
  ASSERT_EQ(j["phases"].size(), 1u);
  EXPECT_EQ(j["phases"][0]["completed"], 1);
  EXPECT_EQ(j["phases"][0]["sent"], 2);  // a 400 stops the run
  EXPECT_EQ(j["phases"][0]["errors_by_code"]["HTTP_400"], 1);
  // The message is the OpenAI error JSON's, not the raw body.
  const std::string message = j["phases"][0]["requests"][1]["error"];
  EXPECT_FALSE(message.empty());
  EXPECT_EQ(message.find('{'), std::string::npos) << message;
}

TEST_F(LoadOpenAiE2eTest, BadOrUnreachableTargetsSaySo) {
  ToolRun r = RunLoad("--api=openai --target=" + server_->address + " --num_requests=1");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--target"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("http://"), std::string::npos) << r.err;
  r = RunLoad("--api=openai --target=http://127.0.0.1:1 --connect_timeout=1 --num_requests=1");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("--target http://127.0.0.1:1"), std::string::npos) << r.err;
  r = RunLoad("--target=" + server_->address + " --compare=api --num_requests=1");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--openai_target"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace saturn::clients
