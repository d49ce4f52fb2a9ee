// docs/grafana-dashboard.json against a live server: the file is a Grafana dashboard whose
// panels cover what the README promises (TTFT/TPOT/ITL percentiles, throughput, queue, KV
// use, bottleneck class, MFU/MBU/busy), and every PromQL expression names only series that
// Saturn's /metrics exports (scraped after real requests), with labels those series carry.
#include <gtest/gtest.h>
#include <httplib.h>

#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "tests/server/dashboard_util.h"
#include "tests/server/diagnostics_test_util.h"

namespace saturn::testing {
namespace {

std::set<std::string> Matches(const std::string& text, const std::regex& re, int group) {
  std::set<std::string> out;
  for (std::sregex_iterator it(text.begin(), text.end(), re), end; it != end; ++it) {
    out.insert((*it)[group].str());
  }
  return out;
}

TEST(GrafanaDashboardTest, PanelsCoverTheServingAndDiagnosisFigures) {
  const nlohmann::json d = LoadDashboard();
  ASSERT_TRUE(d.contains("panels"));
  EXPECT_FALSE(d.value("uid", "").empty());
  std::string titles;
  int with_targets = 0;
  for (const auto& p : d["panels"]) {
    titles += p.value("title", "") + "\n";
    if (p.value("type", "") == "row") continue;
    ASSERT_TRUE(p.contains("targets")) << p.value("title", "");
    EXPECT_EQ(p["datasource"]["type"], "prometheus") << p.value("title", "");
    ++with_targets;
  }
  EXPECT_GE(with_targets, 10);
  for (const char* want : {"TTFT", "TPOT", "ITL", "throughput", "Queue", "KV cache",
                           "Bottleneck class", "MFU, MBU and busy"}) {
    EXPECT_NE(titles.find(want), std::string::npos) << "no panel titled with " << want;
  }
}

TEST(GrafanaDashboardTest, EveryExpressionNamesAnExportedSeries) {
  const std::vector<std::string> exprs = DashboardExpressions();
  ASSERT_GE(exprs.size(), 15u);

  ServerConfig config = DiagConfig();
  config.metrics_port = -1;
  auto s = StartServer(config);
  ASSERT_NE(s, nullptr);
  for (const StreamResult& r : RunConcurrent(s->stub.get(), 2, 6, 4)) {
    ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  }
  httplib::Client client("127.0.0.1", s->app->metrics_port());
  client.set_read_timeout(60, 0);
  auto res = client.Get("/metrics");
  ASSERT_TRUE(res) << httplib::to_string(res.error());
  ASSERT_EQ(res->status, 200);
  // Series names and label names of every sample line.
  std::set<std::string> series, labels;
  std::istringstream in(res->body);
  std::string line;
  const std::regex kLabel(R"(([a-zA-Z_][a-zA-Z0-9_]*)=")");
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    series.insert(line.substr(0, line.find_first_of("{ ")));
    for (const std::string& l : Matches(line, kLabel, 1)) labels.insert(l);
  }
  ASSERT_GT(series.size(), 20u);

  const std::regex kMetric(R"(saturn:[a-zA-Z0-9_:]+)");
  const std::regex kBy(R"(\b(?:by|without)\s*\(([^)]*)\))");
  const std::regex kLegend(R"(\{\{\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\}\})");
  // Labels Prometheus adds to every scraped series (target labels), and `le` of histograms.
  const std::set<std::string> kTargetLabels = {"instance", "job"};
  for (const std::string& e : exprs) {
    const std::set<std::string> names = Matches(e, kMetric, 0);
    EXPECT_FALSE(names.empty()) << "expression names no Saturn series: " << e;
    for (const std::string& n : names) {
      EXPECT_EQ(series.count(n), 1u) << n << " (in `" << e << "`) is not in /metrics";
    }
    for (const std::string& group : Matches(e, kBy, 1)) {
      std::stringstream parts(group);
      std::string label;
      while (std::getline(parts, label, ',')) {
        label.erase(0, label.find_first_not_of(' '));
        label.erase(label.find_last_not_of(' ') + 1);
        if (label.empty() || kTargetLabels.count(label)) continue;
        EXPECT_EQ(labels.count(label), 1u) << "label " << label << " (in `" << e << "`)";
      }
    }
  }
  // Legends name only labels the series carry.
  const nlohmann::json d = LoadDashboard();
  for (const auto& p : d["panels"]) {
    if (!p.contains("targets")) continue;
    for (const auto& t : p["targets"]) {
      for (const std::string& l : Matches(t.value("legendFormat", ""), kLegend, 1)) {
        if (!kTargetLabels.count(l)) EXPECT_EQ(labels.count(l), 1u) << "legend label " << l;
      }
    }
  }
}

}  // namespace
}  // namespace saturn::testing
