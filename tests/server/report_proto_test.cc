// An analyzer's report in its proto (server/report_proto.h) and the proto's two renderings
// (proto/render/): the JSON carries every part of the report, the text shows the verdict,
// the profile, the plan and the applied action's outcome.
#include "server/report_proto.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "proto/render/report_json.h"
#include "proto/render/report_text.h"
#include "tests/diag/synthetic.h"

namespace saturn {
namespace {

DiagnosticsReport Sample() {
  testing_diag::StepSpec s;
  s.seqs = 4;
  s.queue_depth = 30;
  s.max_num_seqs = 4;
  const auto steps = testing_diag::Steps(testing_diag::Small(), testing_diag::TrueModel{}, s, 6);
  DiagnosticsReport r = Analyze(steps, 0, steps.back().end_us, testing_diag::TestCalibration(),
                                testing_diag::TestContext(testing_diag::Small(), 4));
  TrackedOutcome t;
  t.what = "raise max_num_seqs 4 -> 20";
  t.measured_tokens_per_s = 90;
  t.predicted_tokens_per_s = 100;
  r.tracked = t;
  return r;
}

TEST(ReportFormatTest, JsonCarriesEveryPart) {
  const auto j = nlohmann::json::parse(ReportJson(ToProto(Sample()), true));
  EXPECT_EQ(j["bottleneck"], "BOTTLENECK_MEMORY_BOUND");
  EXPECT_FALSE(j["signals"].empty());
  EXPECT_TRUE(j["signals"][0].contains("threshold"));
  EXPECT_GT(j["profile"]["busy_fraction"].get<double>(), 0.9);
  EXPECT_EQ(j["classes"][0]["op_class"], "gemm");
  EXPECT_EQ(j["plan"][0]["kind"], "raise_max_num_seqs");
  EXPECT_TRUE(j["plan"][0]["tradeoffs"].is_array());
  EXPECT_EQ(j["model"]["classes"].size(), 5u);
  EXPECT_EQ(j["tracked"]["what"], "raise max_num_seqs 4 -> 20");
}

TEST(ReportFormatTest, TextShowsVerdictProfileAndPlan) {
  const std::string t = RenderReport(ToProto(Sample()));
  EXPECT_NE(t.find("MEMORY_BOUND"), std::string::npos);
  EXPECT_NE(t.find("nvidia-smi"), std::string::npos);
  EXPECT_NE(t.find("MBU"), std::string::npos);
  EXPECT_NE(t.find("raise max_num_seqs 4 ->"), std::string::npos);
  EXPECT_NE(t.find("applied"), std::string::npos);
  EXPECT_LT(std::count(t.begin(), t.end(), '\n'), 40);
}

}  // namespace
}  // namespace saturn
