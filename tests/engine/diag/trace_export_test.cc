// The trace export parses as JSON; on each track events are ordered, children lie within
// their step slice and siblings do not overlap.
#include "engine/diag/trace_export.h"

#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>

#include "tests/engine/diag/synthetic.h"

namespace saturn {
namespace {

std::vector<StepRecord> WithOps(int n) {
  auto steps = testing_diag::Steps(testing_diag::Micro(), testing_diag::TrueModel{},
                                   testing_diag::StepSpec{}, n, 50.0, 1e9);
  for (StepRecord& r : steps) {
    // Ops back to back after schedule + prepare, each 3 us (issue = device on the CPU).
    double at = r.prepare_us;
    for (int i = 0; i < 6; ++i) {
      OpRecord op;
      op.kind = i % 2 ? OpKind::kGemm : OpKind::kRmsNorm;
      op.cost = {1000.0 * i, 64.0 * i};
      op.issue_begin_us = op.device_begin_us = at;
      op.issue_end_us = op.device_end_us = at + 3;
      at += 3.0000004;  // sub-ns jitter must not break nesting
      r.ops.push_back(op);
    }
    r.op_count = 6;
  }
  steps[1].ops[2].device_end_us = 1e6;  // a bogus time is clamped into the step
  return steps;
}

void CheckNesting(const nlohmann::json& doc, size_t expected_steps) {
  ASSERT_TRUE(doc.contains("traceEvents"));
  std::map<int, std::vector<nlohmann::json>> tracks;
  for (const auto& e : doc["traceEvents"]) {
    if (e["ph"] == "M") continue;
    ASSERT_EQ(e["ph"], "X");
    ASSERT_GE(e["dur"].get<double>(), 0.0);
    tracks[e["tid"].get<int>()].push_back(e);
  }
  ASSERT_EQ(tracks.size(), 2u);
  for (auto& [tid, events] : tracks) {
    SCOPED_TRACE(tid);
    double parent_b = -1, parent_e = -1, prev_end = -1, prev_ts = -1;
    size_t parents = 0;
    for (const auto& e : events) {
      const double b = e["ts"], end = b + e["dur"].get<double>();
      EXPECT_GE(b, prev_ts);  // ordered by start
      prev_ts = b;
      if (e["cat"] == "step") {
        EXPECT_GE(b, parent_e);  // steps do not overlap
        parent_b = b, parent_e = end, prev_end = b;
        ++parents;
        continue;
      }
      EXPECT_GE(b, parent_b - 1e-9);
      EXPECT_LE(end, parent_e + 1e-9);
      EXPECT_GE(b, prev_end - 1e-9);  // siblings in order, no overlap
      prev_end = end;
    }
    EXPECT_EQ(parents, expected_steps);
  }
}

TEST(TraceExportTest, ParsesAndNests) {
  const std::string text = ExportChromeTrace(WithOps(5));
  const auto doc = nlohmann::json::parse(text);
  CheckNesting(doc, 5);
  bool has_args = false;
  for (const auto& e : doc["traceEvents"]) {
    if (e["ph"] == "X" && e["name"] == "gemm") {
      has_args = e["args"].contains("flops") && e["args"].contains("bytes");
    }
  }
  EXPECT_TRUE(has_args);
}

TEST(TraceExportTest, LastNSteps) {
  const auto doc = nlohmann::json::parse(ExportChromeTrace(WithOps(5), 2));
  CheckNesting(doc, 2);
  EXPECT_EQ(doc["traceEvents"][3]["ts"], 0.0);  // first exported step starts at 0
}

TEST(TraceExportTest, UntimedStepsGetOneDeviceSlice) {
  auto steps = testing_diag::Steps(testing_diag::Micro(), testing_diag::TrueModel{},
                                   testing_diag::StepSpec{}, 3);
  const auto doc = nlohmann::json::parse(ExportChromeTrace(steps));
  CheckNesting(doc, 3);
  EXPECT_EQ(nlohmann::json::parse(ExportChromeTrace({}))["traceEvents"].size(), 3u);
}

}  // namespace
}  // namespace saturn
