// docs/grafana-dashboard.json for the tests that check it: the parsed document and every
// PromQL expression in it (panel targets and templating queries). Header-only, test code only.
#pragma once

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace saturn::testing {

inline nlohmann::json LoadDashboard() {
  std::ifstream in(std::string(SATURN_SOURCE_DIR) + "/docs/grafana-dashboard.json");
  EXPECT_TRUE(in.good()) << "docs/grafana-dashboard.json is missing";
  if (!in.good()) return nlohmann::json::object();
  return nlohmann::json::parse(in);
}

// Every "expr" and templating "definition", anywhere in the document, in document order.
inline void CollectExpressions(const nlohmann::json& j, std::vector<std::string>* out) {
  if (j.is_object()) {
    for (const auto& [key, value] : j.items()) {
      if ((key == "expr" || key == "definition") && value.is_string()) {
        out->push_back(value.get<std::string>());
      } else {
        CollectExpressions(value, out);
      }
    }
  } else if (j.is_array()) {
    for (const auto& v : j) CollectExpressions(v, out);
  }
}

inline std::vector<std::string> DashboardExpressions() {
  std::vector<std::string> exprs;
  CollectExpressions(LoadDashboard(), &exprs);
  return exprs;
}

}  // namespace saturn::testing
