// saturn-load end to end against a real saturn-server (the built binary, tiny model, CPU
// backend) on a loopback port the kernel picks: closed- and open-loop runs account for every
// request, the JSON holds every figure the table shows, and bad input (--compare=cuda_graphs
// on CPU, an unreachable target, a rejected request, a malformed JSONL line, a bad flag)
// gets a plain message and a non-zero exit with the files still written.
// Needs the saturn-server and saturn-load targets built (the default build builds them).
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "clients/load/run_table.h"
#include "clients/load/runner.h"
#include "clients/load/session.h"
#include "nlohmann/json.hpp"
#include "tests/clients/server_process.h"
#include "tests/clients/table_figures.h"

namespace saturn::clients {
namespace {

using testing::kLoadBinary;
using testing::ReadFile;
using testing::ToolRun;

// A folder of this process's own, so that tests run in parallel do not share files.
std::string Dir() {
  static const std::string dir = testing::MakeProcessDir("saturn_load_e2e_");
  return dir;
}

ToolRun RunLoad(const std::string& args) {
  return testing::RunTool(kLoadBinary, args, Dir(), "load");
}

class LoadE2eTest : public testing::SharedServerSuite {
 protected:
  static void SetUpTestSuite() { StartSharedServer(kLoadBinary, "saturn-load", Dir()); }

  static LoadConfig Config() {
    LoadConfig c;
    c.target = {server_->address};
    c.input_len = *ParseLengthSpec("--input_len", "uniform:4:12");
    c.output_len = *ParseLengthSpec("--output_len", "uniform:2:8");
    c.seed = 5;
    return c;
  }

  static void ExpectAccounted(const SessionResult& res) {
    // Every stream object is gone once the session returns (none is torn down later on a
    // gRPC thread, racing whatever the caller does next).
    EXPECT_EQ(LiveGenerateCalls(), 0);
    for (const PhaseReport& p : res.phases) {
      EXPECT_EQ(p.metrics.sent, static_cast<int64_t>(p.outcome.records.size())) << p.label;
      EXPECT_EQ(p.metrics.completed + p.metrics.errors, p.metrics.sent) << p.label;
      EXPECT_EQ(p.metrics.errors, 0) << p.label;
      EXPECT_GT(p.metrics.measured, 0) << p.label;
      EXPECT_EQ(p.metrics.ttft_ms.count, p.metrics.measured) << p.label;
      EXPECT_GT(p.metrics.request_throughput, 0) << p.label;
      EXPECT_GT(p.metrics.queue_ms.count, 0) << p.label;
      ASSERT_EQ(p.windows.size(), 1u) << p.label;
      EXPECT_LE(p.windows[0].start_us, p.windows[0].end_us);
      for (const RequestRecord& r : p.outcome.records) {
        EXPECT_TRUE(r.has_final);
        EXPECT_GE(r.output_tokens, 2);
        EXPECT_LE(r.output_tokens, 8);
      }
    }
  }
};

TEST_F(LoadE2eTest, ClosedLoopSweepAccountsForEveryRequest) {
  LoadConfig c = Config();
  c.concurrency = {1, 3};
  c.num_requests = 10;
  const SessionResult res = RunSession(c, SessionObserver(), nullptr);
  ASSERT_EQ(res.exit_code, 0) << res.error;
  ASSERT_EQ(res.phases.size(), 2u);
  for (const PhaseReport& p : res.phases) EXPECT_EQ(p.metrics.sent, 10);
  ExpectAccounted(res);
}

TEST_F(LoadE2eTest, OpenLoopAccountsForEveryRequest) {
  LoadConfig c = Config();
  c.request_rate = {40, INFINITY};
  c.num_requests = 12;
  SessionResult res = RunSession(c, SessionObserver(), nullptr);
  ASSERT_EQ(res.exit_code, 0) << res.error;
  ASSERT_EQ(res.phases.size(), 2u);
  for (const PhaseReport& p : res.phases) EXPECT_EQ(p.metrics.sent, 12);
  ExpectAccounted(res);

  // Bounded by time alone: whatever was sent is accounted for.
  c.request_rate = {20};
  c.num_requests = 0;
  c.duration_s = 0.5;
  res = RunSession(c, SessionObserver(), nullptr);
  ASSERT_EQ(res.exit_code, 0) << res.error;
  EXPECT_GT(res.phases[0].metrics.sent, 0);
  ExpectAccounted(res);
}

TEST_F(LoadE2eTest, MinMeasureKeepsSendingUntilTheLoadRanLongEnough) {
  LoadConfig c = Config();
  c.concurrency = {2};
  c.num_requests = 2;  // both are warm-up: without min_measure_s nothing would be steady
  c.min_measure_s = 1.0;
  const SessionResult res = RunSession(c, SessionObserver(), nullptr);
  ASSERT_EQ(res.exit_code, 0) << res.error;
  ASSERT_EQ(res.phases.size(), 1u);
  const PhaseReport& p = res.phases[0];
  EXPECT_GT(p.metrics.sent, 2);
  EXPECT_NE(p.outcome.measure_note.find("--min_measure_s"), std::string::npos)
      << p.outcome.measure_note;
  // The load ran about min_measure_s after the warm-up (the last send may precede the stop).
  EXPECT_GT(p.metrics.stability.span_end_s - p.metrics.stability.span_start_s, 0.5);
  ExpectAccounted(res);
}

TEST_F(LoadE2eTest, JsonHoldsEveryFigureTheTableShows) {
  const std::string dir = Dir();
  const ToolRun r = RunLoad("--target=" + server_->address +
                            " --concurrency=1,2 --num_requests=6 --input_len=8 --output_len=4"
                            " --min_measure_s=0"
                            " --slo_ttft_ms=1000 --slo_tpot_ms=1000 --json=" +
                            dir + "/run.json --csv=" + dir + "/run.csv");
  ASSERT_EQ(r.code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(ReadFile(dir + "/run.json"));
  const std::set<std::string> in_json = testing::JsonFigures(j);
  const std::vector<std::string> figures = testing::TableFigures(r.out);
  EXPECT_GT(figures.size(), 50u) << r.out;
  for (const std::string& f : figures) EXPECT_TRUE(in_json.count(f)) << f << " in\n" << r.out;
  ASSERT_EQ(j["phases"].size(), 2u);
  EXPECT_EQ(j["phases"][1]["sent"], 6);
  EXPECT_EQ(j["settings"]["concurrency"], nlohmann::json({1, 2}));
  EXPECT_EQ(j["targets"][0]["backend"], "cpu");
  const std::string csv = ReadFile(dir + "/run.csv");
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 3) << csv;  // header + 2 phases
}

// --follow_plan: the top action of the phase's diagnosis is followed once (a tiny server at
// one client is waiting for requests: more clients), the follow-up phase carries the
// prediction beside the server's measurement, and the server's options are as before.
TEST_F(LoadE2eTest, FollowPlanRunsTheTopActionOnceAndRestoresTheOptions) {
  absl::StatusOr<std::unique_ptr<Connection>> conn = Connection::Connect({server_->address}, 10);
  ASSERT_TRUE(conn.ok()) << conn.status();
  auto infos = (*conn)->FetchInfos(10);
  ASSERT_TRUE(infos.ok()) << infos.status();
  const v1::EngineOptions start = (*infos)[0].options();

  LoadConfig c = Config();
  c.concurrency = {1};
  c.num_requests = 24;
  c.follow_plan = true;
  const SessionResult res = RunSession(c, SessionObserver(), nullptr);
  ASSERT_EQ(res.exit_code, 0) << res.error;
  ExpectAccounted(res);
  ASSERT_FALSE(res.phases.empty());
  const std::string table = FormatTable(res);
  if (res.phases.size() == 1) {  // nothing to follow on this machine now: it says why
    EXPECT_FALSE(res.phases[0].follow_note.empty());
    EXPECT_NE(table.find("  plan         " + res.phases[0].follow_note), std::string::npos);
  } else {
    ASSERT_EQ(res.phases.size(), 2u);
    const PhaseReport& f = res.phases[1];
    EXPECT_NE(f.label.find(" plan"), std::string::npos) << f.label;
    ASSERT_TRUE(f.followed.has_value());
    EXPECT_FALSE(f.followed->action.empty());
    EXPECT_GT(f.followed->predicted, 0);
    EXPECT_GT(f.followed->measured, 0) << f.followed->note;
    EXPECT_NEAR(f.followed->error, f.followed->predicted / f.followed->measured - 1, 1e-9);
    if (f.followed->kind == "raise_client_concurrency") EXPECT_GT(f.concurrency, 1);
    EXPECT_NE(table.find("followed the previous phase's top action"), std::string::npos) << table;
  }
  infos = (*conn)->FetchInfos(10);
  ASSERT_TRUE(infos.ok()) << infos.status();
  EXPECT_EQ((*infos)[0].options().max_num_seqs(), start.max_num_seqs());
  EXPECT_EQ((*infos)[0].options().max_num_batched_tokens(), start.max_num_batched_tokens());
  EXPECT_EQ((*infos)[0].options().cuda_graphs(), start.cuda_graphs());

  // Not with a comparison; over the HTTP front only with Saturn's gRPC address beside it.
  c.compare = "cuda_graphs";
  EXPECT_NE(c.Validate().message().find("--follow_plan"), std::string::npos);
  c.compare = "";
  c.api = "openai";
  c.target = {"http://127.0.0.1:1"};
  EXPECT_NE(c.Validate().message().find("--diag_target"), std::string::npos);
  c.diag_target = "127.0.0.1:2";
  EXPECT_TRUE(c.Validate().ok()) << c.Validate();
}

TEST_F(LoadE2eTest, CompareCudaGraphsOnCpuSaysSoAndFails) {
  const ToolRun r = RunLoad("--target=" + server_->address +
                            " --concurrency=2 --num_requests=4 --compare=cuda_graphs");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("cannot use CUDA graphs"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("FAILED_PRECONDITION"), std::string::npos) << r.err;
}

TEST_F(LoadE2eTest, UnreachableTargetFailsFastWithItsName) {
  const ToolRun r = RunLoad("--target=127.0.0.1:1 --connect_timeout=1 --num_requests=1");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("--target 127.0.0.1:1: cannot connect"), std::string::npos) << r.err;
}

// A port no server can have is named at once, not after the whole connect timeout.
TEST_F(LoadE2eTest, APortOutsideTheRangeIsNamedWithoutWaiting) {
  for (const char* port : {"0", "65536", "-1", "99999999999", "http"}) {
    const ToolRun r = RunLoad(std::string("--target=127.0.0.1:") + port +
                              " --connect_timeout=600 --num_requests=1");
    EXPECT_NE(r.code, 0) << port;
    EXPECT_NE(r.err.find(std::string("port \"") + port + "\" is not a number in [1, 65535]"),
              std::string::npos)
        << r.err;
  }
}

TEST_F(LoadE2eTest, RejectedRequestStopsTheRunAndKeepsWhatWasMeasured) {
  const std::string dir = Dir();
  std::string too_long = "{\"prompt_token_ids\": [3";
  for (int i = 0; i < 600; ++i) too_long += ", 3";
  too_long += "], \"max_tokens\": 4}";
  std::ofstream(dir + "/rejected.jsonl") << "{\"input_len\": 5, \"max_tokens\": 3}\n"
                                         << too_long << "\n";
  const ToolRun r =
      RunLoad("--target=" + server_->address + " --prompts=" + dir +
              "/rejected.jsonl --concurrency=1 --num_requests=10 --json=" + dir + "/rejected.json");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("INVALID_ARGUMENT"), std::string::npos) << r.err;
  const nlohmann::json j = nlohmann::json::parse(ReadFile(dir + "/rejected.json"));
  ASSERT_EQ(j["phases"].size(), 1u);
  EXPECT_EQ(j["phases"][0]["completed"], 1);
  EXPECT_EQ(j["phases"][0]["errors_by_code"]["INVALID_ARGUMENT"], 1);
  EXPECT_EQ(j["phases"][0]["sent"], 2);
  EXPECT_NE(j["error"].get<std::string>().find("rejected"), std::string::npos);
}

TEST_F(LoadE2eTest, MalformedJsonlNamesFileAndLine) {
  const std::string path = Dir() + "/bad.jsonl";
  std::ofstream(path) << "{\"prompt\": \"hi\"}\n{\"prompt\": \"hi\",}\n";
  const ToolRun r = RunLoad("--target=" + server_->address + " --prompts=" + path);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find(path + ":2: not valid JSON"), std::string::npos) << r.err;
}

// A prompts file that cannot be used is named before any connection is tried (the target
// here is unreachable, so a check after connecting would report the target instead).
TEST_F(LoadE2eTest, PromptsFileIsCheckedBeforeConnecting) {
  const std::string missing = Dir() + "/missing.jsonl";
  ToolRun r = RunLoad("--target=127.0.0.1:1 --connect_timeout=30 --prompts=" + missing);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--prompts: the prompts file " + missing + ": cannot open"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(r.err.find("cannot connect"), std::string::npos) << r.err;
  const std::string empty = Dir() + "/empty.jsonl";
  std::ofstream(empty) << "\n";
  r = RunLoad("--target=127.0.0.1:1 --connect_timeout=30 --prompts=" + empty);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find(empty + ": no prompts"), std::string::npos) << r.err;
}

TEST_F(LoadE2eTest, BadFlagNamesTheFlagAndLimit) {
  ToolRun r = RunLoad("--target=" + server_->address + " --concurrency=0");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--concurrency"), std::string::npos) << r.err;
  r = RunLoad("--target=" + server_->address + " --input_len=uniform:9:3");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--input_len"), std::string::npos) << r.err;
  // An open loop ignores --concurrency: asking for both is refused, not half-honoured.
  r = RunLoad("--target=" + server_->address + " --concurrency=3 --request_rate=5");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--concurrency: not with --request_rate"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace saturn::clients
