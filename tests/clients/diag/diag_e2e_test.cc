// saturn-diag and saturn-load's diagnosis end to end against a real saturn-server (the built
// binary, tiny model, CPU backend) on a loopback port the kernel picks, after a short load
// so the step ring holds steps: get --json is JSON with the verdict, trace -o writes Chrome
// trace JSON, roofline -o writes an SVG that parses, info shows the calibration, watch stops
// after --count, apply on an underloaded server does not touch it and exits 0, and bad
// flags or an unreachable target exit non-zero with the flag or target named.
// Needs the saturn-server and saturn-diag targets built (the default build builds them).
#include <gtest/gtest.h>

#include <string>

#include "clients/load/diagnosis.h"
#include "clients/load/run_table.h"
#include "clients/load/session.h"
#include "nlohmann/json.hpp"
#include "tests/clients/diag/diag_xml_check.h"
#include "tests/clients/server_process.h"

namespace saturn::clients {
namespace {

using testing::kDiagBinary;
using testing::ReadFile;
using testing::ToolRun;

std::string Dir() {
  static const std::string dir = testing::MakeProcessDir("saturn_diag_e2e_");
  return dir;
}

ToolRun RunDiag(const std::string& args) {
  return testing::RunTool(kDiagBinary, args, Dir(), "diag");
}

class DiagE2eTest : public testing::SharedServerSuite {
 protected:
  static void SetUpTestSuite() {
    StartSharedServer(kDiagBinary, "saturn-diag", Dir());
    if (server_ == nullptr || server_->address.empty()) return;
    // A short closed-loop load, so the step ring holds steps; its diagnosis is kept.
    LoadConfig c;
    c.target = {server_->address};
    c.concurrency = {2};
    c.num_requests = 8;
    c.input_len = *ParseLengthSpec("--input_len", "16");
    c.output_len = *ParseLengthSpec("--output_len", "8");
    load_ = new SessionResult(RunSession(c, SessionObserver(), nullptr));
  }
  static void TearDownTestSuite() {
    SharedServerSuite::TearDownTestSuite();
    delete load_;
    load_ = nullptr;
  }
  void SetUp() override {
    SharedServerSuite::SetUp();
    if (HasFatalFailure()) return;
    ASSERT_NE(load_, nullptr);
    ASSERT_EQ(load_->exit_code, 0) << load_->error;
  }
  static std::string T() { return " --target=" + server_->address; }

  static SessionResult* load_;
};
SessionResult* DiagE2eTest::load_ = nullptr;

TEST_F(DiagE2eTest, LoadRunCarriesTheServersDiagnosisOfItsWindow) {
  ASSERT_EQ(load_->phases.size(), 1u);
  const PhaseReport& p = load_->phases[0];
  ASSERT_EQ(p.diagnoses.size(), 1u) << p.diagnosis_note;
  const nlohmann::json j = nlohmann::json::parse(p.diagnoses[0]);
  EXPECT_TRUE(j.contains("bottleneck"));
  EXPECT_GT(j["profile"]["steps"].get<int>(), 0) << j.dump(2);
  // The full report (step model, plan inputs) is in the one JSON form, not under a key.
  EXPECT_EQ(j["model"]["classes"].size(), 6u) << j.dump(2);  // one per op class, comm too
  EXPECT_TRUE(j.contains("plan_curve")) << j.dump(2);
  EXPECT_DOUBLE_EQ(j["window_begin_us"].get<double>(), static_cast<double>(p.windows[0].start_us));
  const std::string table = FormatTable(*load_);
  EXPECT_NE(table.find("  diagnosis    "), std::string::npos) << table;
  EXPECT_NE(table.find("signals: "), std::string::npos) << table;
  EXPECT_NE(table.find("plan: "), std::string::npos) << table;
  EXPECT_EQ(table.find("not available"), std::string::npos) << table;
}

TEST_F(DiagE2eTest, GetJsonIsTheReport) {
  ToolRun r = RunDiag("get --json --window=60" + T());
  ASSERT_EQ(r.code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.out;
  ASSERT_TRUE(j.contains("bottleneck")) << r.out;
  EXPECT_NE(j["bottleneck"], "BOTTLENECK_UNKNOWN") << r.out;
  EXPECT_GT(j["profile"]["steps"].get<int>(), 0);
  EXPECT_GT(j["calibration"]["gemm_flops_per_s"].get<double>(), 0);

  r = RunDiag("get --window=60" + T());
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("verdict    "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("signals"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("plan"), std::string::npos) << r.out;
}

TEST_F(DiagE2eTest, TraceWritesChromeTraceJson) {
  const std::string path = Dir() + "/trace.json";
  const ToolRun r = RunDiag("trace -o " + path + " --steps=20" + T());
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("wrote " + path), std::string::npos) << r.out;
  const nlohmann::json j = nlohmann::json::parse(ReadFile(path), nullptr, false);
  ASSERT_FALSE(j.is_discarded());
  ASSERT_TRUE(j.contains("traceEvents"));
  EXPECT_FALSE(j["traceEvents"].empty());
}

// record writes the report's whole input; analyze judges it offline, as the server did.
TEST_F(DiagE2eTest, RecordThenAnalyzeOfflineGivesTheServersVerdict) {
  const std::string path = Dir() + "/recording.json";
  ToolRun r = RunDiag("record -o " + path + " --window=600" + T());
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("saturn-diag analyze " + path), std::string::npos) << r.out;
  const nlohmann::json rec = nlohmann::json::parse(ReadFile(path));
  EXPECT_EQ(rec["format"], "saturn-recording");
  EXPECT_GT(rec["steps"].size(), 10u);  // the load's steps
  r = RunDiag("analyze " + path);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("verdict"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("the same verdict and top action as the server's"), std::string::npos)
      << r.out;
  r = RunDiag("analyze --json " + path);
  ASSERT_EQ(r.code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_TRUE(j["same_as_recorded"].get<bool>()) << r.out;
  EXPECT_NE(j["report"]["bottleneck"].get<std::string>().find(rec["bottleneck"].get<std::string>()),
            std::string::npos)
      << r.out;
  // Files that are not recordings are refused naming the problem.
  r = RunDiag("analyze " + Dir() + "/missing.json");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("cannot read"), std::string::npos) << r.err;
  r = RunDiag("analyze");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("needs a recording file"), std::string::npos) << r.err;
}

TEST_F(DiagE2eTest, RooflineWritesAnSvgThatParses) {
  const std::string path = Dir() + "/roofline.svg";
  const ToolRun r = RunDiag("roofline -o " + path + " --window=60" + T());
  ASSERT_EQ(r.code, 0) << r.err;
  const std::vector<testing::Element> els = testing::Parse(ReadFile(path));
  ASSERT_FALSE(els.empty());
  EXPECT_EQ(els[0].name, "svg");
  EXPECT_NE(testing::ById(els, "roofline"), nullptr) << "the server is calibrated: a roof";
  EXPECT_GT(testing::Count(els, "circle", "class", "op-class"), 0);
  EXPECT_GT(testing::Count(els, "circle", "class", "step"), 0);
}

TEST_F(DiagE2eTest, InfoShowsTheCalibration) {
  ToolRun r = RunDiag("info" + T());
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("tiny"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("peak GEMM"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("bandwidth"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("ridge"), std::string::npos) << r.out;
  r = RunDiag("info --json" + T());
  ASSERT_EQ(r.code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_GT(j["calibration"]["gemm_flops_per_s"].get<double>(), 0) << r.out;
}

TEST_F(DiagE2eTest, WatchStopsAfterCount) {
  const ToolRun r = RunDiag("watch --count=2 --interval_ms=200 --window=5" + T());
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("report 1 at"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("report 2 at"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("\033[2J"), std::string::npos) << "not a terminal: no clearing";
}

TEST_F(DiagE2eTest, ApplyOnAnUnderloadedServerLeavesItAndExitsZero) {
  const ToolRun r = RunDiag("apply --settle=0.5 --window=60 --json" + T());
  ASSERT_EQ(r.code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  // Between runs nothing waits on this server: the plan is empty or client-side, or, the one
  // server-side change for a small batch, speculation (where the proposals scored while the
  // requests ran would have been kept).
  if (j["applied"] == true) {
    EXPECT_EQ(j["action"]["kind"], "set_speculative_tokens") << r.out;
    EXPECT_GT(j["options"]["num_speculative_tokens"].get<int>(), 0) << r.out;
    return;
  }
  const std::string reason = j["reason"];
  EXPECT_TRUE(reason.find("no plan action") == 0 || reason.find("client-side") == 0) << reason;
}

TEST_F(DiagE2eTest, BadInputExitsNonZeroNamingWhatIsWrong) {
  ToolRun r = RunDiag("get --target=127.0.0.1:1 --timeout=1");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("--target 127.0.0.1:1: cannot connect"), std::string::npos) << r.err;
  r = RunDiag("trace" + T());
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("-o: trace needs an output file"), std::string::npos) << r.err;
  r = RunDiag("frobnicate" + T());
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("unknown command \"frobnicate\""), std::string::npos) << r.err;
  r = RunDiag("watch --interval_ms=5" + T());
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--interval_ms"), std::string::npos) << r.err;
  // A flag for another command was dropped silently (get --count=5 printed one report).
  r = RunDiag("get --count=5 --dry_run" + T());
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--count is for watch, not get"), std::string::npos) << r.err;
  r = RunDiag("roofline -o /nonexistent-dir/x.svg" + T());
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("/nonexistent-dir/x.svg"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace saturn::clients
