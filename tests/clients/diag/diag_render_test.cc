// Renderings of hand-built Diagnostics protos (no server): the full report shows the verdict,
// every signal, class and plan action with its trade-offs and the tracked outcome; the short
// form saturn-load prints holds the verdict, the crossed signals and the top action, and each
// of its figures is in the stored JSON; the info page shows the calibration; saturn-diag's
// option checks name the flag.
#include <gtest/gtest.h>

#include "absl/strings/str_join.h"
#include "clients/diag/commands.h"
#include "clients/diag/render_info.h"
#include "clients/load/diagnosis.h"
#include "clients/load/run_table.h"
#include "nlohmann/json.hpp"
#include "proto/render/report_text.h"
#include "tests/clients/diag/diag_test_report.h"
#include "tests/clients/table_figures.h"

namespace saturn::clients {
namespace {

bool Has(const std::string& text, const std::string& needle) {
  return text.find(needle) != std::string::npos;
}

TEST(DiagRenderTest, FullReportShowsVerdictSignalsClassesEveryActionAndOutcome) {
  const v1::DiagnosticsReport r = testing::SampleReport();
  const std::string text = RenderReport(r);
  EXPECT_TRUE(Has(text, "verdict    MEMORY_BOUND")) << text;
  EXPECT_TRUE(Has(text, r.summary())) << text;
  for (const v1::Signal& s : r.signals()) EXPECT_TRUE(Has(text, s.name())) << s.name();
  EXPECT_TRUE(Has(text, "-> requests waited for a slot")) << text;  // crossed: its meaning
  for (const v1::OpClassProfile& c : r.classes()) EXPECT_TRUE(Has(text, c.op_class()));
  for (const v1::PlanAction& a : r.plan()) EXPECT_TRUE(Has(text, a.what())) << a.what();
  EXPECT_TRUE(Has(text, "120.0 -> 300.0")) << text;
  EXPECT_TRUE(Has(text, "- kv_preemption at 64: past 64 sequences")) << text;
  EXPECT_TRUE(Has(text,
                  "expected error +-12%, prefill 30% of step time, outside the measured "
                  "step shapes"))
      << text;
  // An action without an expected error (the prefill-budget one) gets no such line.
  EXPECT_EQ(text.find("expected error"), text.rfind("expected error")) << text;
  EXPECT_TRUE(Has(text, "KV holds 64 seqs")) << text;
  EXPECT_TRUE(Has(text, "tracked    raise max_num_seqs 2 -> 4 (settled, 30 steady steps)")) << text;
  EXPECT_TRUE(Has(text, "110.0")) << text;
  EXPECT_TRUE(Has(text, "MFU 1.25%")) << text;
}

TEST(DiagRenderTest, EmptyPlanSaysWhy) {
  v1::DiagnosticsReport r = testing::SampleReport();
  r.clear_plan();
  r.set_plan_note("at the compute ceiling");
  EXPECT_TRUE(Has(RenderReport(r), "no action: at the compute ceiling"));
  const std::vector<std::string> lines = ShortDiagnosis(r);
  EXPECT_EQ(lines.back(), "plan: no action: at the compute ceiling");
  r.set_plan_note("batch 64 reaches the plateau");
  EXPECT_EQ(ShortDiagnosis(r).back(), "plan: no action (why: see the JSON)");
}

TEST(DiagRenderTest, ShortFormHasVerdictCrossedSignalsAndTopAction) {
  const std::vector<std::string> lines = ShortDiagnosis(testing::SampleReport());
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_TRUE(Has(lines[0], "MEMORY_BOUND (steps MEMORY_BOUND) over 120 steps in 10.00 s"))
      << lines[0];
  EXPECT_EQ(lines[1], "signals: max_waiting_requests 6.00 (threshold 0.50)");
  EXPECT_EQ(lines[2],
            "plan: raise max_num_seqs 4 -> 48: 120.00 -> 300.00 tok/s, TPOT 8.00 -> 12.50 ms "
            "(more in JSON)");
}

TEST(DiagRenderTest, StoredJsonRoundTripsAndHoldsEveryShortFormFigure) {
  v1::DiagnosticsReport r = testing::SampleReport();
  // The full report (the step model here) is in the one JSON form, not beside it; a `json`
  // the server filled is not stored.
  r.mutable_model()->set_host_us(12.5);
  r.set_json(R"({"bottleneck": "BOTTLENECK_MEMORY_BOUND"})");
  const std::string stored = DiagnosisJson(r);
  const nlohmann::json j = nlohmann::json::parse(stored);
  EXPECT_EQ(j["bottleneck"], "BOTTLENECK_MEMORY_BOUND");
  EXPECT_EQ(j["model"]["host_us"], 12.5);
  EXPECT_FALSE(j.contains("json"));

  absl::StatusOr<v1::DiagnosticsReport> back = ParseDiagnosis(stored);
  ASSERT_TRUE(back.ok()) << back.status();
  r.clear_json();
  EXPECT_EQ(back->SerializeAsString(), r.SerializeAsString());
  EXPECT_FALSE(ParseDiagnosis("{\"bottleneck\": 12.5}").ok());

  // saturn-load's table/JSON contract: each figure the short form prints is in the JSON.
  const std::string table = "== phase ==\n" + absl::StrJoin(ShortDiagnosis(*back), "\n");
  const std::set<std::string> in_json = testing::JsonFigures(j);
  for (const std::string& f : testing::TableFigures(table)) {
    EXPECT_TRUE(in_json.count(f)) << f << " in\n" << table;
  }
}

TEST(DiagRenderTest, LoadTableShowsTheShortDiagnosisAndTheCompareView) {
  SessionResult res;
  res.compare = true;
  PhaseReport off, on;
  off.label = "c=2 graphs=off";
  off.cuda_graphs = 0;
  off.diagnoses = {DiagnosisJson(testing::SampleReport())};
  on.label = "c=2 graphs=on";
  on.cuda_graphs = 1;
  on.diagnosis_note = "--target x has no Diagnostics service";
  res.phases = {off, on};
  const std::string table = FormatTable(res);
  EXPECT_TRUE(Has(table, "  diagnosis    MEMORY_BOUND (steps MEMORY_BOUND)")) << table;
  EXPECT_TRUE(Has(table, "plan: raise max_num_seqs 4 -> 48")) << table;
  EXPECT_TRUE(Has(table, "diagnosis    not available: --target x has no Diagnostics")) << table;
  EXPECT_TRUE(Has(table, "diagnosis, graphs off        MEMORY_BOUND; raise max_num_seqs 4 -> 48"))
      << table;
  EXPECT_TRUE(Has(table, "diagnosis, graphs on         not available")) << table;
}

TEST(DiagRenderTest, InfoShowsCalibrationGraphsAndLimits) {
  v1::ServerInfo info;
  info.mutable_model()->set_name("tiny");
  info.mutable_backend()->set_name("cpu");
  info.mutable_backend()->set_device_name("Test CPU");
  info.mutable_options()->set_max_num_seqs(8);
  info.mutable_limits()->set_max_num_seqs_limit(256);
  info.mutable_limits()->set_max_model_len(512);
  info.mutable_kv_cache()->set_num_blocks(64);
  info.mutable_kv_cache()->set_block_size(16);
  info.mutable_kv_cache()->set_dtype("bf16");
  const v1::DiagnosticsReport r = testing::SampleReport();
  std::string text = RenderInfo(info, &r.calibration(), "");
  EXPECT_TRUE(Has(text, "tiny")) << text;
  EXPECT_TRUE(Has(text, "max_num_seqs 8 (limit 256)")) << text;
  EXPECT_TRUE(Has(text, "64 blocks x 16 tokens (0 free), bf16,")) << text;
  EXPECT_TRUE(Has(text, "2 full-length sequences fit")) << text;
  EXPECT_TRUE(Has(text, "peak GEMM  100 GFLOP/s   (512x512x512 sgemm, best of 5)")) << text;
  EXPECT_TRUE(Has(text, "bandwidth  20.0 GB/s   (256 MiB memcpy)")) << text;
  EXPECT_TRUE(Has(text, "ridge      5.00 FLOP/byte")) << text;
  EXPECT_TRUE(Has(text, "graphs       none captured")) << text;
  info.mutable_cuda_graphs()->add_captured_sizes(1);
  info.mutable_cuda_graphs()->add_captured_sizes(2);
  info.mutable_cuda_graphs()->add_captured_sizes(4);
  text = RenderInfo(info, nullptr, "the server has no Diagnostics service");
  EXPECT_TRUE(Has(text, "calibration  not available: the server has no Diagnostics")) << text;
  EXPECT_TRUE(Has(text, "decode batch sizes 1,2,4 captured")) << text;
}

TEST(DiagRenderTest, FormatsSiAndBottleneckNames) {
  EXPECT_EQ(FormatSi(4.56e10, "FLOP/s"), "45.6 GFLOP/s");
  EXPECT_EQ(FormatSi(999, "B/s"), "999 B/s");
  EXPECT_EQ(FormatSi(1500, "B/s"), "1.50 kB/s");
  EXPECT_EQ(FormatSi(2e6, ""), "2.00M");
  EXPECT_EQ(BottleneckName(v1::BOTTLENECK_LAUNCH_BOUND), "LAUNCH_BOUND");
  EXPECT_EQ(BottleneckName(v1::BOTTLENECK_UNDERLOADED), "UNDERLOADED");
  EXPECT_EQ(BottleneckName(v1::BOTTLENECK_UNKNOWN), "UNKNOWN (no steps)");
}

TEST(DiagOptionsTest, ValidateNamesTheFlag) {
  DiagOptions o;
  o.command = "get";
  EXPECT_TRUE(o.Validate().ok());
  auto msg = [](const DiagOptions& x) { return std::string(x.Validate().message()); };
  DiagOptions b = o;
  b.command = "nope";
  EXPECT_TRUE(Has(msg(b), "unknown command \"nope\"")) << msg(b);
  b = o;
  b.command = "trace";
  EXPECT_TRUE(Has(msg(b), "-o: trace needs an output file")) << msg(b);
  b = o;
  b.interval_ms = 50;
  EXPECT_TRUE(Has(msg(b), "--interval_ms")) << msg(b);
  b = o;
  b.window_s = 0;
  EXPECT_TRUE(Has(msg(b), "--window")) << msg(b);
  b = o;
  b.timeout_s = -1;
  EXPECT_TRUE(Has(msg(b), "--timeout")) << msg(b);
  b = o;
  b.count = -2;
  EXPECT_TRUE(Has(msg(b), "--count")) << msg(b);
}

}  // namespace
}  // namespace saturn::clients
