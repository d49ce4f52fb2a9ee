// The end table, JSON and CSV from known results (no server): every figure the table
// shows is in the JSON, including the CUDA-graphs comparison (which a CPU-only test server
// cannot produce end to end); the CSV has one row per phase.
#include <gtest/gtest.h>

#include "clients/load/diagnosis.h"
#include "clients/load/plan_follow.h"
#include "clients/load/run_table.h"
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

TEST(ReportTest, PlainWordsGiveVerdictWhyChangeAndPredictedGain) {
  SessionResult res;
  res.phases.push_back(MakePhase("c=1", -1, 1.0));
  res.phases.push_back(MakePhase("c=16", -1, 0.5));
  v1::DiagnosticsReport r;
  r.set_bottleneck(v1::BOTTLENECK_UNDERLOADED);
  r.set_step_bound(v1::BOTTLENECK_MEMORY_BOUND);
  r.set_summary("no request waits and the batch is far under max_num_seqs");
  r.mutable_profile()->set_busy_fraction(0.98);
  r.mutable_profile()->set_mfu(0.28);
  r.mutable_profile()->set_mbu(0.93);
  r.mutable_profile()->set_mean_batch_seqs(1);
  v1::PlanAction* a = r.add_plan();
  a->set_what("raise client concurrency 16 -> 30 in-flight requests");
  a->set_tokens_per_s_before(64);
  a->set_tokens_per_s_after(160);
  a->set_tpot_ms_before(33.7);
  a->set_tpot_ms_after(167.7);
  res.phases[1].diagnoses.push_back(DiagnosisJson(r));
  const std::string text = PlainConclusion(res);
  EXPECT_NE(text.find("Verdict: at c=16 the server was UNDERLOADED (its steps MEMORY_BOUND): busy "
                      "98 %, MFU 28 %, MBU 93 %"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("Why: No request waits and the batch is far under max_num_seqs."),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("at c=1"), std::string::npos) << text;  // the sweep's measured change
  EXPECT_NE(text.find("What to change: raise client concurrency 16 -> 30"), std::string::npos);
  EXPECT_NE(text.find("Predicted gain: 64.0 -> 160.0 tok/s (+150 %), at a TPOT of 33.7 -> 167.7"),
            std::string::npos)
      << text;
  // The table ends with it.
  EXPECT_NE(FormatTable(res).find("== in plain words =="), std::string::npos);

  // Without any diagnosis there is no verdict, and it says so.
  res.phases[1].diagnoses.clear();
  EXPECT_NE(PlainConclusion(res).find("no verdict"), std::string::npos);
}

// --follow_plan takes a live option change, never an action that needs a restart
// (quantize_weights): a phase run again without it would measure the weights in force.
TEST(PlanFollowTest, RestartActionsAreNotFollowed) {
  v1::DiagnosticsReport r;
  v1::PlanAction* a = r.add_plan();
  a->set_kind("quantize_weights");
  a->set_what("quantize weights to q8_0 (restart: --quantization q8_0)");
  a->set_max_num_seqs(4);
  a->set_restart_flags("--quantization q8_0");
  v1::EngineOptions now;
  now.set_max_num_seqs(4);
  std::string why;
  EXPECT_FALSE(NextFollowStep(r, 2, now, &why).has_value());
  EXPECT_NE(why.find("needs a restart with --quantization q8_0"), std::string::npos) << why;
  a->set_kind("raise_max_num_seqs");
  a->set_what("raise max_num_seqs 4 -> 8");
  a->set_max_num_seqs(8);
  a->clear_restart_flags();
  const std::optional<FollowStep> s = NextFollowStep(r, 2, now, &why);
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->change, "max_num_seqs 4 -> 8");
}

}  // namespace
}  // namespace saturn::clients
