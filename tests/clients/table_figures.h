// Test helper: the figures a saturn-load table shows, and the figures a JSON document holds,
// both as the strings the table would print ("%.2f", or an integer), so a test can check
// that every figure of the table is in the file. Header-only, test code only.
#pragma once

#include <cmath>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "nlohmann/json.hpp"

namespace saturn::clients::testing {

inline bool IsNumber(const std::string& t) {
  if (t.empty()) return false;
  size_t i = t[0] == '-' ? 1 : 0, digits = 0, dots = 0;
  for (; i < t.size(); ++i) {
    if (t[i] == '.') {
      ++dots;
    } else if (t[i] >= '0' && t[i] <= '9') {
      ++digits;
    } else {
      return false;
    }
  }
  return digits > 0 && dots <= 1 && t.back() != '.';
}

// Numbers in the table after its header (the lines before the first "==" describe the
// workload and targets, which the JSON holds as strings), skipping the closing footnote and
// the "in plain words" prose after it (it quotes the server's summary sentence).
inline std::vector<std::string> TableFigures(const std::string& table) {
  std::vector<std::string> out;
  std::istringstream in(table);
  std::string line;
  bool body = false;
  while (std::getline(in, line)) {
    if (line.rfind("== in plain words", 0) == 0) break;
    if (line.rfind("==", 0) == 0) body = true;
    if (!body || line.rfind("percentiles:", 0) == 0) continue;
    std::string tok;
    auto flush = [&] {
      if (!tok.empty() && tok.back() == 'x') tok.pop_back();  // ratios print as "1.23x"
      if (IsNumber(tok)) out.push_back(tok);
      tok.clear();
    };
    for (char c : line) {
      if (c == ' ' || c == '=' || c == '(' || c == ')' || c == ',' || c == ':' || c == ';' ||
          c == '/' || c == '%') {
        flush();
      } else {
        tok += c;
      }
    }
    flush();
  }
  return out;
}

inline void CollectJsonFigures(const nlohmann::json& j, std::set<std::string>* out) {
  if (j.is_number()) {
    const double x = j.get<double>();
    out->insert(absl::StrFormat("%.2f", x));
    if (std::floor(x) == x && std::abs(x) < 1e15)
      out->insert(absl::StrFormat("%d", static_cast<int64_t>(x)));
  } else if (j.is_structured()) {
    for (const auto& v : j) CollectJsonFigures(v, out);
  }
}

inline std::set<std::string> JsonFigures(const nlohmann::json& j) {
  std::set<std::string> s;
  CollectJsonFigures(j, &s);
  return s;
}

}  // namespace saturn::clients::testing
