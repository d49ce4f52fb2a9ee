// The end table, JSON and CSV from known results (no server): every figure the table
// shows is in the JSON, including the CUDA-graphs comparison (which a CPU-only test server
// cannot produce end to end); the CSV has one row per phase.
#include <gtest/gtest.h>

#include "clients/report.h"
#include "tests/clients/table_figures.h"

namespace saturn::clients {
namespace {

PhaseReport MakePhase(const std::string& label, int graphs, double scale) {
  PhaseReport p;
  p.label = label;
  p.concurrency = 2;
  p.cuda_graphs = graphs;
  for (int i = 0; i < 12; ++i) {
    RequestRecord r;
    r.index = i;
    r.send_s = 0.1 * i;
    for (int k = 0; k < 4; ++k)
      r.token_times_s.push_back(r.send_s + scale * (0.05 + 0.01 * k * (i % 3 + 1)));
    r.token_counts.assign(4, 1);
    r.output_tokens = 4;
    r.prompt_tokens = 9;
    r.has_final = true;
    r.final_s = r.token_times_s.back() + 0.001;
    r.end_s = r.final_s;
    r.server_queue_ms = 0.37 * i;
    if (i == 5) {
      r.status = "RESOURCE_EXHAUSTED";
      r.token_times_s.clear();
    }
    p.outcome.records.push_back(r);
  }
  MetricsOptions o;
  o.warmup_requests = 2;
  o.slo_ttft_ms = 60;
  p.warmup_requests = 2;
  p.metrics = ComputeMetrics(p.outcome.records, o);
  p.diagnosis_note = "not yet";
  return p;
}

SessionResult MakeResult() {
  SessionResult res;
  res.config.num_requests = 12;
  res.config.slo_ttft_ms = 60;
  res.config.compare = "cuda_graphs";
  res.compare = true;
  res.workload = "synthetic";
  res.phases.push_back(MakePhase("c=2 graphs=off", 0, 1.0));
  res.phases.push_back(MakePhase("c=2 graphs=on", 1, 0.7));
  return res;
}

TEST(ReportTest, EveryFigureOfTheTableIsInTheJson) {
  const SessionResult res = MakeResult();
  const std::string table = FormatTable(res);
  const nlohmann::json j = SessionToJson(res);
  const std::set<std::string> in_json = testing::JsonFigures(j);
  const std::vector<std::string> figures = testing::TableFigures(table);
  EXPECT_GT(figures.size(), 100u);
  for (const std::string& f : figures) EXPECT_TRUE(in_json.count(f)) << f << " in\n" << table;
  EXPECT_NE(table.find("CUDA graphs"), std::string::npos);
  EXPECT_NE(table.find("on/off"), std::string::npos);
  ASSERT_EQ(j["comparison"].size(), 1u);
  EXPECT_EQ(j["phases"].size(), 2u);
  EXPECT_EQ(j["phases"][0]["requests"].size(), 12u);
  EXPECT_EQ(j["phases"][0]["errors_by_code"]["RESOURCE_EXHAUSTED"], 1);
  EXPECT_EQ(j["settings"]["slo_ttft_ms"], 60.0);
}

TEST(ReportTest, ComparisonRatiosAreOnOverOff) {
  const SessionResult res = MakeResult();
  for (const CompareRow& r : CompareRows(res.phases[0], res.phases[1])) {
    if (r.off != 0) EXPECT_DOUBLE_EQ(r.ratio, r.on / r.off) << r.name;
  }
  const std::vector<CompareRow> rows = CompareRows(res.phases[0], res.phases[1]);
  EXPECT_EQ(rows[0].name, "request throughput (req/s)");
}

TEST(ReportTest, CsvHasAHeaderAndOneRowPerPhase) {
  const std::string csv = FormatCsv(MakeResult());
  int lines = 0;
  for (char c : csv) lines += c == '\n';
  EXPECT_EQ(lines, 3);
  EXPECT_EQ(csv.rfind("label,mode,concurrency", 0), 0u);
  EXPECT_NE(csv.find("ttft_ms_p99"), std::string::npos);
  EXPECT_NE(csv.find("RESOURCE_EXHAUSTED:1"), std::string::npos);
}

}  // namespace
}  // namespace saturn::clients
