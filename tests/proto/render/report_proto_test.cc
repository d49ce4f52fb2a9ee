// An analyzer's report in its proto (proto/render/report_proto.h) and the proto's two renderings
// (proto/render/): the JSON carries every part of the report, the text shows the verdict,
// the profile, the plan and the applied action's outcome. Every stored calibration field
// reaches v1.Calibration, and every field of that message has a source.
#include "proto/render/report_proto.h"

#include <google/protobuf/descriptor.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <type_traits>
#include <variant>

#include "engine/measure/calibration_fields.h"
#include "proto/render/report_json.h"
#include "proto/render/report_text.h"
#include "tests/engine/diag/synthetic.h"
#include "tests/engine/measure/calibration_values.h"

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
  EXPECT_EQ(j["model"]["classes"].size(), 6u);  // one per op class, comm included
  EXPECT_EQ(j["tracked"]["what"], "raise max_num_seqs 4 -> 20");
}

TEST(ReportFormatTest, TextShowsVerdictProfileAndPlan) {
  const std::string t = RenderReport(ToProto(Sample()));
  EXPECT_NE(t.find("MEMORY_BOUND"), std::string::npos);
  EXPECT_NE(t.find("nvidia-smi"), std::string::npos);
  EXPECT_NE(t.find("MBU"), std::string::npos);
  EXPECT_NE(t.find("raise max_num_seqs 4 ->"), std::string::npos);
  EXPECT_NE(t.find("applied"), std::string::npos);
  // One screen: two actions (raise max_num_seqs, then quantize_weights) with their trade-offs.
  EXPECT_LT(std::count(t.begin(), t.end(), '\n'), 48);
}

TEST(CalibrationProtoTest, EveryStoredFieldReachesTheProtoByName) {
  using google::protobuf::FieldDescriptor;
  const Calibration c = testing_calibration::DistinctValues();
  v1::Calibration p;
  const google::protobuf::Descriptor* d = p.GetDescriptor();
  const google::protobuf::Reflection* r = p.GetReflection();
  ToProto(c, 12.5, &p);  // skips a name whose type differs; the loop below names it
  std::set<std::string> covered;
  for (const CalibrationField& f : kCalibrationFields) {
    const FieldDescriptor* fd = d->FindFieldByName(f.name);
    if (std::string(f.name) == "measured_unix_s") {  // the file's; the proto carries age_s
      EXPECT_EQ(fd, nullptr);
      continue;
    }
    ASSERT_NE(fd, nullptr) << f.name << " has no v1.Calibration field";
    covered.insert(f.name);
    std::visit(
        [&](auto member) {
          using T = std::remove_cvref_t<decltype(c.*member)>;
          if constexpr (std::is_same_v<T, std::string>) {
            ASSERT_EQ(fd->cpp_type(), FieldDescriptor::CPPTYPE_STRING) << f.name;
            EXPECT_EQ(r->GetString(p, fd), c.*member);
          } else if constexpr (std::is_same_v<T, double>) {
            ASSERT_EQ(fd->cpp_type(), FieldDescriptor::CPPTYPE_DOUBLE) << f.name;
            EXPECT_EQ(r->GetDouble(p, fd), c.*member);
          } else {
            ASSERT_EQ(fd->cpp_type(), FieldDescriptor::CPPTYPE_BOOL) << f.name;
            EXPECT_EQ(r->GetBool(p, fd), c.*member);
          }
        },
        f.member);
  }
  EXPECT_DOUBLE_EQ(p.ridge_flops_per_byte(), c.ridge_flops_per_byte());
  EXPECT_EQ(p.source(), c.source);
  EXPECT_EQ(p.calibration_ms(), 12.5);
  // Set elsewhere: the derived and per-request fields (server/diag/diagnostics_request.cc).
  const std::set<std::string> others = {
      "ridge_flops_per_byte", "source", "calibration_ms", "age_s", "suspect", "suspect_reason"};
  for (int i = 0; i < d->field_count(); ++i) {
    const std::string& name = d->field(i)->name();
    EXPECT_TRUE(covered.count(name) > 0 || others.count(name) > 0)
        << "v1.Calibration." << name << " is in no table: add it to kCalibrationFields";
  }
}

}  // namespace
}  // namespace saturn
