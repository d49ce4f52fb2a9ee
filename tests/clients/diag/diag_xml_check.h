// Test helper: a strict reader for the XML subset an SVG writer may produce (one root,
// balanced tags, quoted unique attributes, no raw '<' or stray '&'), and lookups on what it
// read. Header-only, test code only; no XML library is linked into the tests.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <map>
#include <string>
#include <vector>

namespace saturn::clients::testing {

struct Element {
  std::string name;
  std::map<std::string, std::string> attrs;
  std::string text;  // direct text content
};

// Returns "" when well-formed, else what is wrong and where.
inline std::string ParseXml(const std::string& s, std::vector<Element>* out) {
  size_t i = 0;
  std::vector<size_t> stack;  // indices into out
  bool root_seen = false;
  auto where = [](size_t at) { return " at offset " + std::to_string(at); };
  auto entities_ok = [](const std::string& t) {
    for (size_t k = 0; k < t.size(); ++k) {
      if (t[k] == '<') return false;
      if (t[k] != '&') continue;
      const size_t semi = t.find(';', k);
      if (semi == std::string::npos) return false;
      const std::string e = t.substr(k + 1, semi - k - 1);
      if (e != "amp" && e != "lt" && e != "gt" && e != "quot" && e != "apos" &&
          !(e.size() > 1 && e[0] == '#')) {
        return false;
      }
    }
    return true;
  };
  auto name_at = [&s](size_t* k) {
    const size_t b = *k;
    while (*k < s.size() && (std::isalnum(static_cast<unsigned char>(s[*k])) || s[*k] == '-' ||
                             s[*k] == '_' || s[*k] == ':' || s[*k] == '.')) {
      ++*k;
    }
    return s.substr(b, *k - b);
  };
  while (i < s.size()) {
    if (s[i] != '<') {
      const size_t e = std::min(s.find('<', i), s.size());
      const std::string text = s.substr(i, e - i);
      const bool blank = text.find_first_not_of(" \t\r\n") == std::string::npos;
      if (stack.empty() && !blank) return "text outside the root" + where(i);
      if (!entities_ok(text)) return "bad character or entity in text" + where(i);
      if (!stack.empty()) (*out)[stack.back()].text += text;
      i = e;
      continue;
    }
    if (s.compare(i, 5, "<?xml") == 0) {
      if (i != 0) return "XML declaration not at the start" + where(i);
      i = s.find("?>", i);
      if (i == std::string::npos) return "unterminated declaration";
      i += 2;
      continue;
    }
    if (s.compare(i, 4, "<!--") == 0) {
      i = s.find("-->", i);
      if (i == std::string::npos) return "unterminated comment";
      i += 3;
      continue;
    }
    if (s.compare(i, 2, "</") == 0) {
      size_t k = i + 2;
      const std::string name = name_at(&k);
      if (k >= s.size() || s[k] != '>') return "bad end tag" + where(i);
      if (stack.empty() || (*out)[stack.back()].name != name) {
        return "end tag </" + name + "> does not match" + where(i);
      }
      stack.pop_back();
      i = k + 1;
      continue;
    }
    size_t k = i + 1;
    Element el;
    el.name = name_at(&k);
    if (el.name.empty()) return "bad start tag" + where(i);
    if (stack.empty() && root_seen) return "a second root element" + where(i);
    root_seen = true;
    bool self_closing = false;
    while (true) {
      while (k < s.size() && std::isspace(static_cast<unsigned char>(s[k]))) ++k;
      if (k >= s.size()) return "unterminated tag <" + el.name;
      if (s.compare(k, 2, "/>") == 0) {
        self_closing = true;
        k += 2;
        break;
      }
      if (s[k] == '>') {
        ++k;
        break;
      }
      const std::string attr = name_at(&k);
      if (attr.empty() || k >= s.size() || s[k] != '=') return "bad attribute" + where(k);
      ++k;
      if (k >= s.size() || (s[k] != '"' && s[k] != '\'')) return "unquoted attribute" + where(k);
      const char q = s[k++];
      const size_t end = s.find(q, k);
      if (end == std::string::npos) return "unterminated attribute" + where(k);
      const std::string value = s.substr(k, end - k);
      if (!entities_ok(value)) return "bad character in attribute " + attr + where(k);
      if (!el.attrs.emplace(attr, value).second) return "duplicate attribute " + attr + where(k);
      k = end + 1;
    }
    out->push_back(el);
    if (!self_closing) stack.push_back(out->size() - 1);
    i = k;
  }
  if (!stack.empty()) return "unclosed <" + (*out)[stack.back()].name + ">";
  if (!root_seen) return "no root element";
  return "";
}

inline std::vector<Element> Parse(const std::string& svg) {
  std::vector<Element> els;
  const std::string err = ParseXml(svg, &els);
  EXPECT_EQ(err, "") << svg.substr(0, 2000);
  return els;
}

inline int Count(const std::vector<Element>& els, const std::string& name,
                 const std::string& attr = "", const std::string& value = "") {
  int n = 0;
  for (const Element& e : els) {
    if (e.name != name) continue;
    if (!attr.empty()) {
      auto it = e.attrs.find(attr);
      if (it == e.attrs.end() || it->second != value) continue;
    }
    ++n;
  }
  return n;
}

inline const Element* ById(const std::vector<Element>& els, const std::string& id) {
  for (const Element& e : els) {
    auto it = e.attrs.find("id");
    if (it != e.attrs.end() && it->second == id) return &e;
  }
  return nullptr;
}

inline bool AnyText(const std::vector<Element>& els, const std::string& needle) {
  for (const Element& e : els) {
    if (e.text.find(needle) != std::string::npos) return true;
  }
  return false;
}

}  // namespace saturn::clients::testing
