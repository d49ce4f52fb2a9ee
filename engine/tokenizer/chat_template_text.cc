// Text helpers for the chat-template renderer: UTF-8 code points (an invalid byte round-trips
// as Python's surrogateescape does), Python's whitespace, str.strip, upper/lower/title/capitalize,
// repr() of floats and strs, str.split/replace/splitlines, jinja2's title filter and JSON string
// escaping. Pure functions on strings; they know nothing of Values or templates.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>

#include "engine/tokenizer/chat_template_internal.h"

namespace saturn {
namespace chat_template_internal {

// ---------------------------------------------------------------------------------------------
// Text: UTF-8 code points and Python's notion of whitespace.

// Decodes the code point at s[i] and advances i. An invalid byte decodes to U+DC80+byte (Python's
// surrogateescape) so that AppendCp restores it: every byte string round-trips.
uint32_t NextCp(std::string_view s, size_t& i) {
  const auto b = static_cast<unsigned char>(s[i]);
  const int n = b < 0x80 ? 0 : (b >> 5) == 6 ? 1 : (b >> 4) == 14 ? 2 : (b >> 3) == 30 ? 3 : -1;
  if (n == 0) {
    ++i;
    return b;
  }
  if (n > 0 && i + n < s.size()) {
    uint32_t cp = b & (0x3f >> n);
    bool ok = true;
    for (int k = 1; ok && k <= n; ++k) {
      const auto c = static_cast<unsigned char>(s[i + k]);
      ok = (c >> 6) == 2;
      cp = (cp << 6) | (c & 0x3f);
    }
    if (ok) {
      i += n + 1;
      return cp;
    }
  }
  ++i;
  return 0xDC00 + b;
}

void AppendCp(std::string& out, uint32_t cp) {
  if (cp >= 0xDC80 && cp <= 0xDCFF) {
    out += static_cast<char>(cp - 0xDC00);
  } else if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  }
}

std::vector<uint32_t> Cps(std::string_view s) {
  std::vector<uint32_t> out;
  for (size_t i = 0; i < s.size();) out.push_back(NextCp(s, i));
  return out;
}

std::string FromCps(const uint32_t* begin, const uint32_t* end) {
  std::string out;
  for (; begin != end; ++begin) AppendCp(out, *begin);
  return out;
}

// Python's str.isspace().
bool IsSpace(uint32_t c) {
  return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f ||
         c == 0x205f || c == 0x3000;
}

bool AllSpace(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    if (!IsSpace(NextCp(s, i))) return false;
  }
  return true;
}

// Python's str.strip/lstrip/rstrip: `chars` null means whitespace.
std::string Strip(std::string_view s, const std::string* chars, bool left, bool right) {
  const std::vector<uint32_t> cps = Cps(s);
  std::vector<uint32_t> set;
  if (chars) set = Cps(*chars);
  auto strip = [&](uint32_t c) {
    return chars ? std::find(set.begin(), set.end(), c) != set.end() : IsSpace(c);
  };
  size_t b = 0, e = cps.size();
  while (left && b < e && strip(cps[b])) ++b;
  while (right && e > b && strip(cps[e - 1])) --e;
  return FromCps(cps.data() + b, cps.data() + e);
}

// Case mapping for the scripts chat text mostly needs cased letters from: ASCII, Latin-1,
// Latin Extended-A, Greek and Cyrillic (Python maps all of Unicode; the rest pass through).
uint32_t Upper(uint32_t c) {
  if (c < 0x80) return c >= 'a' && c <= 'z' ? c - 32 : c;
  if (c >= 0xe0 && c <= 0xfe && c != 0xf7) return c - 32;
  if (c == 0xff) return 0x178;
  if ((c >= 0x100 && c <= 0x137) || (c >= 0x14a && c <= 0x177)) return c & ~1u;
  if ((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17e)) return (c & 1) ? c : c - 1;
  if (c == 0x3c2) return 0x3a3;
  if (c >= 0x3b1 && c <= 0x3c9) return c - 32;
  if (c >= 0x430 && c <= 0x44f) return c - 32;
  if (c >= 0x450 && c <= 0x45f) return c - 80;
  return c;
}
uint32_t Lower(uint32_t c) {
  if (c < 0x80) return c >= 'A' && c <= 'Z' ? c + 32 : c;
  if (c >= 0xc0 && c <= 0xde && c != 0xd7) return c + 32;
  if (c == 0x178) return 0xff;
  if ((c >= 0x100 && c <= 0x137 && c != 0x130) || (c >= 0x14a && c <= 0x177)) return c | 1u;
  if ((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17e)) return (c & 1) ? c + 1 : c;
  if (c >= 0x391 && c <= 0x3a9 && c != 0x3a2) return c + 32;
  if (c >= 0x410 && c <= 0x42f) return c + 32;
  if (c >= 0x400 && c <= 0x40f) return c + 80;
  return c;
}
bool IsCased(uint32_t c) { return Upper(c) != c || Lower(c) != c; }
bool IsAlpha(uint32_t c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= 0x80 && IsCased(c));
}

std::string MapCase(std::string_view s, uint32_t (*f)(uint32_t)) {
  std::string out;
  for (size_t i = 0; i < s.size();) AppendCp(out, f(NextCp(s, i)));
  return out;
}

// Python's str.title(): a letter after a letter is lowered, any other letter raised.
std::string PyTitle(std::string_view s) {
  std::string out;
  bool prev_cased = false;
  for (size_t i = 0; i < s.size();) {
    const uint32_t c = NextCp(s, i);
    AppendCp(out, prev_cased ? Lower(c) : Upper(c));
    prev_cased = IsCased(c);
  }
  return out;
}

// Python's str.capitalize().
std::string PyCapitalize(std::string_view s) {
  std::string out;
  bool first = true;
  for (size_t i = 0; i < s.size(); first = false)
    AppendCp(out, first ? Upper(NextCp(s, i)) : Lower(NextCp(s, i)));
  return out;
}

// Python's repr() of a float: the shortest round-trip digits, in exponent form when the decimal
// point would sit more than 16 digits right or 4 left of the first digit.
std::string FloatRepr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  const std::string_view sci(buf, r.ptr - buf);
  const bool neg = sci[0] == '-';
  const size_t e = sci.find('e');
  std::string digits;
  for (size_t k = neg; k < e; ++k) {
    if (sci[k] != '.') digits += sci[k];
  }
  const int decpt = std::atoi(std::string(sci.substr(e + 1)).c_str()) + 1;
  std::string out = neg ? "-" : "";
  const int n = static_cast<int>(digits.size());
  if (decpt <= -4 || decpt > 16) {
    out += digits[0];
    if (n > 1) absl::StrAppend(&out, ".", digits.substr(1));
    const int exp = decpt - 1;
    absl::StrAppend(&out, exp < 0 ? "e-" : "e+", std::abs(exp) < 10 ? "0" : "", std::abs(exp));
  } else if (decpt <= 0) {
    absl::StrAppend(&out, "0.", std::string(-decpt, '0'), digits);
  } else if (decpt >= n) {
    absl::StrAppend(&out, digits, std::string(decpt - n, '0'), ".0");
  } else {
    absl::StrAppend(&out, digits.substr(0, decpt), ".", digits.substr(decpt));
  }
  return out;
}

// Python's repr() of a str. Python leaves printable non-ASCII as is; the few non-printable
// ones that chat text can carry (C1 controls, odd spaces, zero-width marks) are escaped.
std::string StrRepr(std::string_view s) {
  const bool dq = s.find('\'') != std::string_view::npos && s.find('"') == std::string_view::npos;
  const char quote = dq ? '"' : '\'';
  std::string out(1, quote);
  for (size_t i = 0; i < s.size();) {
    const uint32_t c = NextCp(s, i);
    if (c == static_cast<uint32_t>(quote) || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f || (c >= 0x80 && c <= 0xa0) || c == 0xad ||
               (c >= 0xDC80 && c <= 0xDCFF)) {
      absl::StrAppend(&out, "\\x", absl::Hex(c & 0xff, absl::kZeroPad2));
    } else if (c == 0x1680 || (c >= 0x2000 && c <= 0x200f) || (c >= 0x2028 && c <= 0x202f) ||
               (c >= 0x205f && c <= 0x2064) || c == 0x3000 || c == 0xfeff) {
      absl::StrAppend(&out, "\\u", absl::Hex(c, absl::kZeroPad4));
    } else {
      AppendCp(out, c);
    }
  }
  out += quote;
  return out;
}

// Python's str.split (sep null: runs of whitespace) or, from the right, str.rsplit.
std::vector<std::string> Split(std::string_view s, const std::string* sep, int64_t maxsplit) {
  std::vector<std::string> out;
  if (sep) {
    size_t from = 0;
    while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
      const size_t at = s.find(*sep, from);
      if (at == std::string_view::npos) break;
      out.emplace_back(s.substr(from, at - from));
      from = at + sep->size();
    }
    out.emplace_back(s.substr(from));
    return out;
  }
  const std::vector<uint32_t> cps = Cps(s);
  size_t i = 0;
  while (true) {
    while (i < cps.size() && IsSpace(cps[i])) ++i;
    if (i == cps.size()) break;
    if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
      out.push_back(FromCps(cps.data() + i, cps.data() + cps.size()));
      break;
    }
    size_t j = i;
    while (j < cps.size() && !IsSpace(cps[j])) ++j;
    out.push_back(FromCps(cps.data() + i, cps.data() + j));
    i = j;
  }
  return out;
}

// Python's str.replace.
std::string Replace(std::string_view s, std::string_view old, std::string_view with,
                    int64_t count) {
  std::string out;
  if (old.empty()) {
    int64_t n = 0;
    for (size_t i = 0; i < s.size();) {
      if (count < 0 || n < count) {
        out += with;
        ++n;
      }
      const size_t b = i;
      NextCp(s, i);
      out += s.substr(b, i - b);
    }
    if (count < 0 || n < count) out += with;
    return out;
  }
  size_t from = 0;
  for (int64_t n = 0; count < 0 || n < count; ++n) {
    const size_t at = s.find(old, from);
    if (at == std::string_view::npos) break;
    absl::StrAppend(&out, std::string(s.substr(from, at - from)), std::string(with));
    from = at + old.size();
  }
  out += s.substr(from);
  return out;
}

// Python's str.splitlines() (without keepends).
std::vector<std::string> SplitLines(std::string_view s) {
  std::vector<std::string> out;
  std::string line;
  for (size_t i = 0; i < s.size();) {
    const size_t b = i;
    const uint32_t c = NextCp(s, i);
    if (c == '\n' || c == '\r' || c == 0x0b || c == 0x0c || (c >= 0x1c && c <= 0x1e) || c == 0x85 ||
        c == 0x2028 || c == 0x2029) {
      if (c == '\r' && i < s.size() && s[i] == '\n') ++i;
      out.push_back(std::move(line));
      line.clear();
    } else {
      line += s.substr(b, i - b);
    }
  }
  if (!line.empty()) out.push_back(std::move(line));
  return out;
}

// jinja2's title filter: a word starts after whitespace or one of -({[<.
std::string JinjaTitle(std::string_view s) {
  std::string out;
  bool start = true;
  for (size_t i = 0; i < s.size();) {
    const uint32_t c = NextCp(s, i);
    const bool sep = IsSpace(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<';
    AppendCp(out, sep ? c : start ? Upper(c) : Lower(c));
    start = sep;
  }
  return out;
}

std::string JsonString(std::string_view s, bool ensure_ascii) {
  std::string out = "\"";
  for (size_t i = 0; i < s.size();) {
    const uint32_t c = NextCp(s, i);
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (c < 0x20 || (ensure_ascii && c > 0x7e && c != 0x7f)) {
          auto u = [&](uint32_t x) { absl::StrAppend(&out, "\\u", absl::Hex(x, absl::kZeroPad4)); };
          if (c >= 0x10000) {
            u(0xD800 + ((c - 0x10000) >> 10));
            u(0xDC00 + ((c - 0x10000) & 0x3ff));
          } else {
            u(c);
          }
        } else {
          AppendCp(out, c);
        }
    }
  }
  return out + "\"";
}
}  // namespace chat_template_internal
}  // namespace saturn
