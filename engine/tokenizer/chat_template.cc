// The chat-template renderer: a lexer, a parser to a small AST and a tree-walking evaluator for
// the Jinja subset of chat templates, each matching Python jinja2 3.1 as Hugging Face configures
// it (see chat_template.h). Values mirror the Python objects jinja2 works on, so printing,
// comparing and stringifying follow Python's rules (repr of lists, float repr, str.strip's
// whitespace). Lists and dicts are immutable once built, as in jinja2's immutable sandbox, so they
// are shared, never copied; namespaces, loop objects and callables live in a per-render arena.
// This file must never throw out of the API, recurse without a bound, or loop without a bound.
#include "engine/tokenizer/chat_template.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <deque>
#include <string_view>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/base/status_macros.h"

namespace saturn {
namespace chat_template_internal {

using absl::StatusOr;

constexpr int kMaxExprDepth = 256;      // AST height, so evaluation recursion stays shallow
constexpr int kMaxMacroDepth = 32;      // macro calls within macro calls
constexpr long kMaxSteps = 20'000'000;  // work units (about one expression each) per render
constexpr int kMaxValueDepth = 128;     // lists and dicts within lists and dicts
constexpr long kMaxRange = 100'000;     // jinja2's sandbox MAX_RANGE

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

// ---------------------------------------------------------------------------------------------
// Values: the Python objects a template sees.

struct Value;
using List = std::vector<Value>;
struct Dict;
struct Namespace;
struct LoopState;
struct Callable;

struct Value {
  enum Kind : uint8_t {
    kUndefined,
    kNone,
    kBool,
    kInt,
    kFloat,
    kString,
    kList,
    kDict,
    kNamespace,
    kLoop,
    kCallable
  };
  Kind kind = kUndefined;
  bool b = false;
  int64_t i = 0;
  double f = 0;
  std::shared_ptr<const std::string> s;  // the string; for undefined, what to name in errors
  std::shared_ptr<const List> list;
  std::shared_ptr<const Dict> dict;
  void* obj = nullptr;  // Namespace*, LoopState* or Callable*, owned by the render's arena
  int depth = 0;        // list/dict nesting, bounded so that recursive walks stay shallow
  bool tuple = false;   // a list that Python would hold as a tuple: only its repr differs

  bool numeric() const { return kind == kBool || kind == kInt || kind == kFloat; }
  double num() const { return kind == kFloat ? f : kind == kInt ? static_cast<double>(i) : b; }
  int64_t integer() const { return kind == kInt ? i : b; }
  const std::string& str() const { return *s; }
};

// An insertion-ordered str -> value map, Python's dict for string keys.
struct Dict {
  std::vector<std::pair<std::string, Value>> items;
  const Value* Find(std::string_view key) const {
    for (const auto& [k, v] : items) {
      if (k == key) return &v;
    }
    return nullptr;
  }
  void Set(const std::string& key, Value v) {
    for (auto& [k, old] : items) {
      if (k == key) {
        old = std::move(v);
        return;
      }
    }
    items.emplace_back(key, std::move(v));
  }
};

struct Namespace {
  Dict attrs;
};

struct LoopState {
  std::shared_ptr<const List> items;
  size_t index0 = 0;
};

struct Node;
struct Scope;

struct Callable {
  enum Kind { kGlobal, kMethod, kMacro } kind = kGlobal;
  std::string name;  // the global's or method's name
  Value self;        // a method's receiver
  const Node* macro = nullptr;
  Scope* closure = nullptr;  // the scope a macro was defined in: it reads variables live
};

Value Undefined(std::string hint) {
  Value v;
  v.s = std::make_shared<const std::string>(std::move(hint));
  return v;
}
Value None() {
  Value v;
  v.kind = Value::kNone;
  return v;
}
Value Bool(bool b) {
  Value v;
  v.kind = Value::kBool;
  v.b = b;
  return v;
}
Value Int(int64_t i) {
  Value v;
  v.kind = Value::kInt;
  v.i = i;
  return v;
}
Value Float(double f) {
  Value v;
  v.kind = Value::kFloat;
  v.f = f;
  return v;
}
Value Str(std::string s) {
  Value v;
  v.kind = Value::kString;
  v.s = std::make_shared<const std::string>(std::move(s));
  return v;
}
Value MakeList(List l, bool tuple = false) {
  Value v;
  v.kind = Value::kList;
  v.tuple = tuple;
  for (const Value& x : l) v.depth = std::max(v.depth, x.depth + 1);
  v.list = std::make_shared<const List>(std::move(l));
  return v;
}
Value MakeDict(Dict d) {
  Value v;
  v.kind = Value::kDict;
  for (const auto& [k, x] : d.items) v.depth = std::max(v.depth, x.depth + 1);
  v.dict = std::make_shared<const Dict>(std::move(d));
  return v;
}

// Python's type(x).__name__, for error messages.
const char* TypeName(const Value& v) {
  switch (v.kind) {
    case Value::kUndefined:
      return "Undefined";
    case Value::kNone:
      return "NoneType";
    case Value::kBool:
      return "bool";
    case Value::kInt:
      return "int";
    case Value::kFloat:
      return "float";
    case Value::kString:
      return "str";
    case Value::kList:
      return v.tuple ? "tuple" : "list";
    case Value::kDict:
      return "dict";
    case Value::kNamespace:
      return "Namespace";
    case Value::kLoop:
      return "LoopContext";
    case Value::kCallable:
      return "function";
  }
  return "object";
}

bool Truthy(const Value& v) {
  switch (v.kind) {
    case Value::kUndefined:
    case Value::kNone:
      return false;
    case Value::kBool:
      return v.b;
    case Value::kInt:
      return v.i != 0;
    case Value::kFloat:
      return v.f != 0;
    case Value::kString:
      return !v.s->empty();
    case Value::kList:
      return !v.list->empty();
    case Value::kDict:
      return !v.dict->items.empty();
    default:
      return true;
  }
}

std::string Repr(const Value& v);

// Python's str(): what {{ x }} prints.
std::string ToStr(const Value& v) {
  switch (v.kind) {
    case Value::kUndefined:
      return "";
    case Value::kString:
      return *v.s;
    default:
      return Repr(v);
  }
}

// Appends Python's repr() of v. It stops once `out` passes the output bound, so that printing
// a list of a million references to one big string cannot exhaust memory; the caller's size
// check then reports the overflow.
void ReprTo(const Value& v, std::string& out) {
  if (out.size() > ChatTemplate::kMaxOutputBytes) return;
  switch (v.kind) {
    case Value::kUndefined:
      out += "Undefined";
      return;
    case Value::kNone:
      out += "None";
      return;
    case Value::kBool:
      out += v.b ? "True" : "False";
      return;
    case Value::kInt:
      out += std::to_string(v.i);
      return;
    case Value::kFloat:
      out += FloatRepr(v.f);
      return;
    case Value::kString:
      out += StrRepr(*v.s);
      return;
    case Value::kList:
      out += v.tuple ? "(" : "[";
      for (size_t k = 0; k < v.list->size() && out.size() <= ChatTemplate::kMaxOutputBytes; ++k) {
        if (k) out += ", ";
        ReprTo((*v.list)[k], out);
      }
      out += !v.tuple ? "]" : v.list->size() == 1 ? ",)" : ")";
      return;
    case Value::kDict: {
      out += "{";
      bool first = true;
      for (const auto& [k, x] : v.dict->items) {
        if (out.size() > ChatTemplate::kMaxOutputBytes) break;
        absl::StrAppend(&out, first ? "" : ", ", StrRepr(k), ": ");
        ReprTo(x, out);
        first = false;
      }
      out += "}";
      return;
    }
    case Value::kNamespace:
      out += "<Namespace>";
      return;
    case Value::kLoop:
      out += "<LoopContext>";
      return;
    case Value::kCallable:
      out += "<function>";
      return;
  }
}

std::string Repr(const Value& v) {
  std::string out;
  ReprTo(v, out);
  return out;
}

// ---------------------------------------------------------------------------------------------
// Source positions, the AST, and the parsed program.

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;
using NodePtr = std::unique_ptr<Node>;
using Body = std::vector<NodePtr>;

struct Expr {
  enum Kind {
    kConst,
    kName,
    kList,
    kDict,
    kAttr,
    kItem,
    kSlice,
    kCall,
    kFilter,
    kTest,
    kNeg,
    kPos,
    kNot,
    kBinary,
    kCompare,
    kAnd,
    kOr,
    kCond
  };
  Kind kind;
  int pos = 0;
  Value value;       // kConst
  std::string name;  // kName, kAttr, kFilter, kTest, kBinary's operator
  // Operands. kCall/kFilter/kTest: args[0] is the callee or subject, then the arguments, the last
  // kwnames.size() of them keyword arguments. kSlice: object, start, stop, step (each may be
  // null). kDict: key, value, key, value... kCond: then, condition, else (may be null).
  std::vector<ExprPtr> args;
  std::vector<std::string> kwnames;
  std::vector<std::string> ops;  // kCompare: between args[k] and args[k+1]
  int height = 1;
};

struct Node {
  enum Kind { kText, kPrint, kIf, kFor, kSet, kSetBlock, kMacro, kBreak, kContinue };
  Kind kind;
  int pos = 0;
  std::string text;                // kText; kSet/kSetBlock/kMacro's name
  std::string attr;                // kSet on a namespace attribute: `set ns.attr = ...`
  std::vector<std::string> names;  // kFor's targets; kSet's unpacking targets; kMacro's params
  // kPrint: the value. kIf: one condition per branch. kFor: iterable, filter (may be null).
  // kSet: the value. kMacro: one default per parameter (null when none).
  std::vector<ExprPtr> exprs;
  std::vector<Body>
      bodies;  // kIf: one per condition, then else. kFor: body, else. kMacro, kSetBlock.
};

}  // namespace chat_template_internal

struct ChatTemplate::Program {
  std::string source;  // with newlines normalized, as jinja2 lexes it
  std::vector<size_t> line_starts;
  chat_template_internal::Body body;

  // "chat_template line L, column C: " for a byte offset into `source`.
  std::string Where(int pos) const {
    const auto it =
        std::upper_bound(line_starts.begin(), line_starts.end(), static_cast<size_t>(pos));
    const size_t line = it - line_starts.begin();
    return absl::StrCat("chat_template line ", line, ", column ", pos - line_starts[line - 1] + 1,
                        ": ");
  }
  absl::Status Error(int pos, std::string_view msg) const {
    return absl::InvalidArgumentError(absl::StrCat(Where(pos), std::string(msg)));
  }
};

namespace chat_template_internal {

using Program = ChatTemplate::Program;

// ---------------------------------------------------------------------------------------------
// Lexer: template text into tokens, applying whitespace control as jinja2's lexer does.

struct Token {
  enum Type {
    kText,
    kPrintBegin,
    kPrintEnd,
    kBlockBegin,
    kBlockEnd,
    kName,
    kString,
    kInt,
    kFloat,
    kOp,
    kEof
  };
  Type type;
  int pos;
  std::string text;  // text, name, string value or operator
  int64_t i = 0;
  double f = 0;
};

bool IsNameStart(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsNameChar(char c) { return IsNameStart(c) || IsDigit(c); }

size_t SkipSpace(std::string_view s, size_t p) {
  while (p < s.size()) {
    size_t q = p;
    if (!IsSpace(NextCp(s, q))) break;
    p = q;
  }
  return p;
}

int HexVal(char c) {
  if (IsDigit(c)) return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// A string literal's body decoded as Python's "unicode-escape" codec decodes it (what jinja2
// does); an unknown escape keeps its backslash.
StatusOr<std::string> Unescape(std::string_view s, const Program& p, int pos) {
  std::string out;
  for (size_t k = 0; k < s.size(); ++k) {
    if (s[k] != '\\' || k + 1 >= s.size()) {
      out += s[k];
      continue;
    }
    const char c = s[++k];
    switch (c) {
      case '\n':
        break;
      case '\\':
        out += '\\';
        break;
      case '\'':
        out += '\'';
        break;
      case '"':
        out += '"';
        break;
      case 'a':
        out += '\a';
        break;
      case 'b':
        out += '\b';
        break;
      case 'f':
        out += '\f';
        break;
      case 'n':
        out += '\n';
        break;
      case 'r':
        out += '\r';
        break;
      case 't':
        out += '\t';
        break;
      case 'v':
        out += '\v';
        break;
      case 'x':
      case 'u':
      case 'U': {
        const int n = c == 'x' ? 2 : c == 'u' ? 4 : 8;
        uint32_t cp = 0;
        for (int d = 1; d <= n; ++d) {
          if (k + d >= s.size() || HexVal(s[k + d]) < 0) {
            return p.Error(pos,
                           absl::StrCat("truncated \\", std::string(1, c), " escape in a string"));
          }
          cp = cp * 16 + HexVal(s[k + d]);
        }
        if (cp > 0x10ffff) return p.Error(pos, "illegal Unicode character in a string escape");
        AppendCp(out, cp);
        k += n;
        break;
      }
      case 'N':
        return p.Error(pos, "\\N{...} escapes are not supported");
      default:
        if (c >= '0' && c <= '7') {
          uint32_t cp = c - '0';
          for (int d = 0; d < 2 && k + 1 < s.size() && s[k + 1] >= '0' && s[k + 1] <= '7'; ++d) {
            cp = cp * 8 + (s[++k] - '0');
          }
          AppendCp(out, cp);
        } else {
          out += '\\';
          out += c;
        }
    }
  }
  return out;
}

class Lexer {
 public:
  explicit Lexer(const Program& p) : p_(p), src_(p.source) {}

  StatusOr<std::vector<Token>> Run() {
    size_t pos = 0;
    bool line_starting = true;  // did the last thing lexed end with a newline?
    while (true) {
      const size_t start = FindTag(pos);
      if (start == std::string_view::npos) {
        if (pos < src_.size()) Push(Token::kText, pos, std::string(src_.substr(pos)));
        break;
      }
      const char kind = src_[start + 1];
      const char sign =
          start + 2 < src_.size() && (src_[start + 2] == '-' || src_[start + 2] == '+')
              ? src_[start + 2]
              : 0;
      EmitText(pos, start, sign, kind != '{', line_starting);
      size_t p = start + 2 + (sign ? 1 : 0);
      if (kind == '#') {
        const size_t end = src_.find("#}", p);
        if (end == std::string_view::npos)
          return p_.Error(start, "unterminated comment: '{#' is never closed by '#}'");
        pos = CloseTag(end, end > p ? src_[end - 1] : 0, true);
      } else if (kind == '%' && IsRaw(p)) {
        ASSIGN_OR_RETURN(pos, Raw(start, p, line_starting));
      } else {
        ASSIGN_OR_RETURN(pos, Tag(start, p, kind));
      }
      line_starting = pos > 0 && src_[pos - 1] == '\n';
    }
    Push(Token::kEof, src_.size(), "");
    return std::move(toks_);
  }

 private:
  size_t FindTag(size_t from) const {
    for (size_t p = src_.find('{', from); p != std::string_view::npos; p = src_.find('{', p + 1)) {
      if (p + 1 < src_.size() && (src_[p + 1] == '{' || src_[p + 1] == '%' || src_[p + 1] == '#'))
        return p;
    }
    return std::string_view::npos;
  }

  void Push(Token::Type type, size_t pos, std::string text) {
    toks_.push_back(Token{type, static_cast<int>(pos), std::move(text)});
  }

  // The text in [from, tag): '-' strips all whitespace before the tag; lstrip_blocks strips the
  // spaces between a line's start and a block or comment tag, unless the tag says '+'.
  void EmitText(size_t from, size_t tag, char sign, bool is_block, bool line_starting) {
    std::string_view text = src_.substr(from, tag - from);
    if (sign == '-') {
      size_t e = text.size();
      while (e > 0) {
        // Step back over one UTF-8 code point.
        size_t b = e - 1;
        while (b > 0 && (static_cast<unsigned char>(text[b]) & 0xC0) == 0x80) --b;
        size_t q = b;
        if (!IsSpace(NextCp(text, q))) break;
        e = b;
      }
      text = text.substr(0, e);
    } else if (sign != '+' && is_block) {
      const size_t nl = text.rfind('\n');
      const size_t l = nl == std::string_view::npos ? 0 : nl + 1;
      if ((l > 0 || line_starting) && l < text.size() && AllSpace(text.substr(l)))
        text = text.substr(0, l);
    }
    if (!text.empty()) Push(Token::kText, from, std::string(text));
  }

  // Where lexing resumes after a tag's closing delimiter at `end` ("%}", "}}" or "#}"), given the
  // character before it: '-' eats the whitespace after; trim_blocks eats one newline after a
  // block or comment tag unless it says '+'.
  size_t CloseTag(size_t end, char before, bool trim) const {
    size_t after = end + 2;
    if (before == '-') return SkipSpace(src_, after);
    if (before != '+' && trim && after < src_.size() && src_[after] == '\n') ++after;
    return after;
  }

  bool IsRaw(size_t p) const {
    p = SkipSpace(src_, p);
    if (src_.substr(p, 3) != "raw" || (p + 3 < src_.size() && IsNameChar(src_[p + 3])))
      return false;
    p = SkipSpace(src_, p + 3);
    if (p < src_.size() && src_[p] == '-') ++p;
    return src_.substr(p, 2) == "%}";
  }

  // {% raw %}...{% endraw %}: the body is text, tags and all.
  StatusOr<size_t> Raw(size_t start, size_t p, bool& line_starting) {
    p = SkipSpace(src_, SkipSpace(src_, p) + 3);
    size_t body = p + 2;
    if (src_[p] == '-') body = SkipSpace(src_, p + 3);
    line_starting = src_[body - 1] == '\n';
    for (size_t q = src_.find("{%", body); q != std::string_view::npos;
         q = src_.find("{%", q + 1)) {
      const char sign =
          q + 2 < src_.size() && (src_[q + 2] == '-' || src_[q + 2] == '+') ? src_[q + 2] : 0;
      size_t r = SkipSpace(src_, q + 2 + (sign ? 1 : 0));
      if (src_.substr(r, 6) != "endraw" || (r + 6 < src_.size() && IsNameChar(src_[r + 6])))
        continue;
      r = SkipSpace(src_, r + 6);
      char before = 0;
      if (r < src_.size() && (src_[r] == '-' || src_[r] == '+')) before = src_[r++];
      if (src_.substr(r, 2) != "%}") continue;
      EmitText(body, q, sign, true, line_starting);
      return CloseTag(r, before, true);
    }
    return p_.Error(start, "unterminated raw block: '{% raw %}' has no '{% endraw %}'");
  }

  // A {{ ... }} or {% ... %} tag, from just after its opening delimiter.
  StatusOr<size_t> Tag(size_t start, size_t p, char kind) {
    const bool print = kind == '{';
    const char close = print ? '}' : '%';
    Push(print ? Token::kPrintBegin : Token::kBlockBegin, start, "");
    std::string brackets;  // open brackets: jinja2 ignores tag ends inside them
    while (true) {
      p = SkipSpace(src_, p);
      if (p >= src_.size()) {
        return p_.Error(start, absl::StrCat("unterminated tag: '", print ? "{{" : "{%",
                                            "' is never closed by '", print ? "}}" : "%}", "'"));
      }
      const std::string_view rest = src_.substr(p);
      if (brackets.empty()) {
        const char before = (rest[0] == '-' || (rest[0] == '+' && !print)) ? rest[0] : 0;
        const size_t at = before ? 1 : 0;
        if (rest.size() >= at + 2 && rest[at] == close && rest[at + 1] == '}') {
          Push(print ? Token::kPrintEnd : Token::kBlockEnd, p, "");
          return CloseTag(p + at, before, !print);
        }
      }
      const char c = rest[0];
      if (IsNameStart(c)) {
        size_t n = 1;
        while (n < rest.size() && IsNameChar(rest[n])) ++n;
        Push(Token::kName, p, std::string(rest.substr(0, n)));
        p += n;
      } else if (IsDigit(c)) {
        ASSIGN_OR_RETURN(p, Number(p));
      } else if (c == '\'' || c == '"') {
        size_t n = 1;
        while (n < rest.size() && rest[n] != c) n += rest[n] == '\\' ? 2 : 1;
        if (n >= rest.size()) return p_.Error(p, "unterminated string literal");
        ASSIGN_OR_RETURN(std::string s, Unescape(rest.substr(1, n - 1), p_, p));
        Push(Token::kString, p, std::move(s));
        p += n + 1;
      } else {
        static constexpr std::string_view kOps2[] = {"//", "**", "==", "!=", "<=", ">="};
        size_t n = 0;
        for (std::string_view op : kOps2) {
          if (rest.substr(0, 2) == op) n = 2;
        }
        if (n == 0 && std::string_view("+-/*%~[](){}<>=.:|,").find(c) != std::string_view::npos)
          n = 1;
        if (n == 0)
          return p_.Error(p, absl::StrCat("unexpected character '", std::string(1, c), "'"));
        if (c == '(' || c == '[' || c == '{') {
          if (static_cast<int>(brackets.size()) >= ChatTemplate::kMaxNesting) {
            return p_.Error(p, "brackets are nested too deeply");
          }
          brackets += c;
        } else if (c == ')' || c == ']' || c == '}') {
          const char open = c == ')' ? '(' : c == ']' ? '[' : '{';
          if (brackets.empty() || brackets.back() != open) {
            return p_.Error(p, absl::StrCat("unexpected '", std::string(1, c), "'"));
          }
          brackets.pop_back();
        }
        Push(Token::kOp, p, std::string(rest.substr(0, n)));
        p += n;
      }
    }
  }

  // An integer or float literal; '_' may separate digits, as in Python.
  StatusOr<size_t> Number(size_t p) {
    const size_t start = p;
    auto digits = [&](size_t q) {
      while (q < src_.size() &&
             (IsDigit(src_[q]) || (src_[q] == '_' && q + 1 < src_.size() && IsDigit(src_[q + 1]))))
        ++q;
      return q;
    };
    p = digits(p);
    bool is_float = false;
    if (p + 1 < src_.size() && src_[p] == '.' && IsDigit(src_[p + 1])) {
      p = digits(p + 1);
      is_float = true;
    }
    if (p < src_.size() && (src_[p] == 'e' || src_[p] == 'E')) {
      size_t q = p + 1;
      if (q < src_.size() && (src_[q] == '+' || src_[q] == '-')) ++q;
      if (q < src_.size() && IsDigit(src_[q])) {
        p = digits(q);
        is_float = true;
      }
    }
    std::string text;
    for (size_t k = start; k < p; ++k) {
      if (src_[k] != '_') text += src_[k];
    }
    Token t{is_float ? Token::kFloat : Token::kInt, static_cast<int>(start), text};
    if (is_float) {
      t.f = std::strtod(text.c_str(), nullptr);
    } else {
      const auto r = std::from_chars(text.data(), text.data() + text.size(), t.i);
      if (r.ec != std::errc()) return p_.Error(start, "integer literal is too large");
    }
    toks_.push_back(std::move(t));
    return p;
  }

  const Program& p_;
  std::string_view src_;
  std::vector<Token> toks_;
};

// ---------------------------------------------------------------------------------------------
// Parser: tokens into statements and expressions, with jinja2's grammar and precedence.

constexpr std::string_view kFilters[] = {
    "abs",        "capitalize", "count",  "d",          "default", "e",       "escape", "first",
    "float",      "indent",     "int",    "items",      "join",    "last",    "length", "list",
    "lower",      "map",        "reject", "rejectattr", "replace", "reverse", "safe",   "select",
    "selectattr", "string",     "title",  "tojson",     "trim",    "unique",  "upper"};
constexpr std::string_view kTests[] = {
    "defined",  "undefined", "none",   "boolean", "true",        "false",
    "integer",  "float",     "number", "string",  "mapping",     "sequence",
    "iterable", "callable",  "odd",    "even",    "divisibleby", "eq",
    "equalto",  "==",        "ne",     "!=",      "lt",          "lessthan",
    "<",        "le",        "<=",     "gt",      "greaterthan", ">",
    "ge",       ">=",        "in",     "sameas",  "lower",       "upper"};

bool Known(std::string_view name, const std::string_view* begin, const std::string_view* end) {
  return std::find(begin, end, name) != end;
}
bool KnownFilter(std::string_view n) { return Known(n, std::begin(kFilters), std::end(kFilters)); }
bool KnownTest(std::string_view n) { return Known(n, std::begin(kTests), std::end(kTests)); }

class Parser {
 public:
  Parser(const Program& p, std::vector<Token> toks) : p_(p), t_(std::move(toks)) {}

  StatusOr<Body> Run() {
    std::string end;
    ASSIGN_OR_RETURN(Body body, ParseBody({}, &end, -1));
    return body;
  }

 private:
  // Keeps parser recursion bounded: each nested construct takes a level.
  struct Deeper {
    explicit Deeper(int& d) : d_(d) { ++d_; }
    ~Deeper() { --d_; }
    int& d_;
  };

  const Token& Cur() const { return t_[i_]; }
  const Token& Peek(size_t k = 1) const { return t_[std::min(i_ + k, t_.size() - 1)]; }
  bool IsOp(std::string_view op) const { return Cur().type == Token::kOp && Cur().text == op; }
  bool IsName(std::string_view n) const { return Cur().type == Token::kName && Cur().text == n; }
  bool SkipOp(std::string_view op) {
    if (!IsOp(op)) return false;
    ++i_;
    return true;
  }
  bool SkipName(std::string_view n) {
    if (!IsName(n)) return false;
    ++i_;
    return true;
  }

  static std::string Describe(const Token& t) {
    switch (t.type) {
      case Token::kText:
        return "template text";
      case Token::kPrintBegin:
        return "'{{'";
      case Token::kPrintEnd:
        return "'}}'";
      case Token::kBlockBegin:
        return "'{%'";
      case Token::kBlockEnd:
        return "'%}'";
      case Token::kName:
        return absl::StrCat("'", t.text, "'");
      case Token::kString:
        return "a string";
      case Token::kInt:
      case Token::kFloat:
        return "a number";
      case Token::kOp:
        return absl::StrCat("'", t.text, "'");
      case Token::kEof:
        return "the end of the template";
    }
    return "";
  }
  absl::Status Unexpected(std::string_view wanted) const {
    return p_.Error(Cur().pos,
                    absl::StrCat("expected ", std::string(wanted), ", found ", Describe(Cur())));
  }
  absl::Status Expect(std::string_view op) {
    if (SkipOp(op)) return absl::OkStatus();
    return Unexpected(absl::StrCat("'", std::string(op), "'"));
  }
  absl::Status ExpectBlockEnd() {
    if (Cur().type == Token::kBlockEnd) {
      ++i_;
      return absl::OkStatus();
    }
    return Unexpected("'%}'");
  }
  StatusOr<std::string> ExpectName() {
    if (Cur().type != Token::kName) return Unexpected("a name");
    return t_[i_++].text;
  }

  ExprPtr New(Expr::Kind kind, int pos) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->pos = pos;
    return e;
  }
  // Finishes a node: its height bounds evaluation recursion, since left-associative chains
  // (a + b + c ...) grow the tree without nesting brackets.
  StatusOr<ExprPtr> Done(ExprPtr e) {
    for (const auto& a : e->args) {
      if (a) e->height = std::max(e->height, a->height + 1);
    }
    if (e->height > kMaxExprDepth) return p_.Error(e->pos, "expression is nested too deeply");
    return e;
  }
  StatusOr<ExprPtr> Binary(Expr::Kind kind, std::string op, int pos, ExprPtr a, ExprPtr b) {
    ExprPtr e = New(kind, pos);
    e->name = std::move(op);
    e->args.push_back(std::move(a));
    e->args.push_back(std::move(b));
    return Done(std::move(e));
  }

  // Statements until one of `ends` opens a block tag; `*end` gets which (the tag's name is
  // consumed, the rest of the tag is left to the caller). `open` is the opening tag's position.
  StatusOr<Body> ParseBody(std::initializer_list<std::string_view> ends, std::string* end,
                           int open) {
    Deeper deeper(depth_);
    if (depth_ > ChatTemplate::kMaxNesting)
      return p_.Error(Cur().pos, "blocks are nested too deeply");
    Body body;
    while (true) {
      const Token& t = Cur();
      if (t.type == Token::kEof) {
        if (ends.size() == 0) return body;
        return p_.Error(open, absl::StrCat("this block is never closed: expected '{% ",
                                           std::string(*ends.begin()),
                                           " %}' (or another end) before the end of the template"));
      }
      if (t.type == Token::kText) {
        auto n = std::make_unique<Node>();
        n->kind = Node::kText;
        n->pos = t.pos;
        n->text = t.text;
        body.push_back(std::move(n));
        ++i_;
        continue;
      }
      if (t.type == Token::kPrintBegin) {
        ++i_;
        auto n = std::make_unique<Node>();
        n->kind = Node::kPrint;
        n->pos = t.pos;
        ASSIGN_OR_RETURN(ExprPtr e, ParseTuple(true));
        n->exprs.push_back(std::move(e));
        if (Cur().type != Token::kPrintEnd) return Unexpected("'}}'");
        ++i_;
        body.push_back(std::move(n));
        continue;
      }
      // A block tag.
      ++i_;
      const int pos = Cur().pos;
      if (Cur().type != Token::kName) return Unexpected("a statement name");
      const std::string kw = Cur().text;
      if (std::find(ends.begin(), ends.end(), kw) != ends.end()) {
        ++i_;
        *end = kw;
        return body;
      }
      ++i_;
      if (kw == "if") {
        ASSIGN_OR_RETURN(NodePtr n, ParseIf(pos));
        body.push_back(std::move(n));
      } else if (kw == "for") {
        ASSIGN_OR_RETURN(NodePtr n, ParseFor(pos));
        body.push_back(std::move(n));
      } else if (kw == "set") {
        ASSIGN_OR_RETURN(NodePtr n, ParseSet(pos));
        body.push_back(std::move(n));
      } else if (kw == "macro") {
        ASSIGN_OR_RETURN(NodePtr n, ParseMacro(pos));
        body.push_back(std::move(n));
      } else if (kw == "break" || kw == "continue") {
        if (loops_ == 0) return p_.Error(pos, absl::StrCat("'", kw, "' outside a for loop"));
        RETURN_IF_ERROR(ExpectBlockEnd());
        auto n = std::make_unique<Node>();
        n->kind = kw == "break" ? Node::kBreak : Node::kContinue;
        n->pos = pos;
        body.push_back(std::move(n));
      } else if (kw == "generation") {
        // transformers' AssistantTracker: outside assistant-mask tracking it renders its body.
        RETURN_IF_ERROR(ExpectBlockEnd());
        std::string e;
        ASSIGN_OR_RETURN(Body inner, ParseBody({"endgeneration"}, &e, pos));
        RETURN_IF_ERROR(ExpectBlockEnd());
        for (auto& n : inner) body.push_back(std::move(n));
      } else if (kw.rfind("end", 0) == 0 || kw == "elif" || kw == "else") {
        return p_.Error(
            pos, absl::StrCat("unexpected '{% ", kw, " %}'",
                              ends.size() ? absl::StrCat(": the innermost open block expects '{% ",
                                                         std::string(*ends.begin()), " %}'")
                                          : std::string(": no block is open")));
      } else {
        return p_.Error(pos, absl::StrCat("statement '", kw, "' is not supported"));
      }
    }
  }

  StatusOr<NodePtr> ParseIf(int pos) {
    auto n = std::make_unique<Node>();
    n->kind = Node::kIf;
    n->pos = pos;
    std::string end = "elif";
    while (end == "elif") {
      ASSIGN_OR_RETURN(ExprPtr cond, ParseTuple(false));
      n->exprs.push_back(std::move(cond));
      RETURN_IF_ERROR(ExpectBlockEnd());
      ASSIGN_OR_RETURN(Body b, ParseBody({"endif", "elif", "else"}, &end, pos));
      n->bodies.push_back(std::move(b));
    }
    if (end == "else") {
      RETURN_IF_ERROR(ExpectBlockEnd());
      ASSIGN_OR_RETURN(Body b, ParseBody({"endif"}, &end, pos));
      n->bodies.push_back(std::move(b));
    }
    RETURN_IF_ERROR(ExpectBlockEnd());
    return n;
  }

  StatusOr<NodePtr> ParseFor(int pos) {
    auto n = std::make_unique<Node>();
    n->kind = Node::kFor;
    n->pos = pos;
    const bool paren = SkipOp("(");
    do {
      ASSIGN_OR_RETURN(std::string name, ExpectName());
      n->names.push_back(std::move(name));
    } while (SkipOp(","));
    if (paren) RETURN_IF_ERROR(Expect(")"));
    if (!SkipName("in")) return Unexpected("'in'");
    ASSIGN_OR_RETURN(ExprPtr iter, ParseTuple(false));
    n->exprs.push_back(std::move(iter));
    ExprPtr filter;
    if (SkipName("if")) {
      ASSIGN_OR_RETURN(filter, ParseExpression(true));
    }
    n->exprs.push_back(std::move(filter));
    if (IsName("recursive")) return p_.Error(Cur().pos, "recursive for loops are not supported");
    RETURN_IF_ERROR(ExpectBlockEnd());
    std::string end;
    ++loops_;
    auto body = ParseBody({"endfor", "else"}, &end, pos);
    --loops_;
    if (!body.ok()) return body.status();
    n->bodies.push_back(std::move(*body));
    n->bodies.emplace_back();
    if (end == "else") {
      RETURN_IF_ERROR(ExpectBlockEnd());
      // The else block runs outside this loop: break/continue there act on an enclosing loop,
      // as in jinja2's generated code.
      ASSIGN_OR_RETURN(n->bodies.back(), ParseBody({"endfor"}, &end, pos));
    }
    RETURN_IF_ERROR(ExpectBlockEnd());
    return n;
  }

  StatusOr<NodePtr> ParseSet(int pos) {
    auto n = std::make_unique<Node>();
    n->kind = Node::kSet;
    n->pos = pos;
    ASSIGN_OR_RETURN(n->text, ExpectName());
    if (SkipOp(".")) {
      ASSIGN_OR_RETURN(n->attr, ExpectName());
    } else if (IsOp(",")) {
      n->names.push_back(n->text);
      while (SkipOp(",")) {
        ASSIGN_OR_RETURN(std::string name, ExpectName());
        n->names.push_back(std::move(name));
      }
    }
    if (Cur().type == Token::kBlockEnd && n->attr.empty() && n->names.empty()) {
      // {% set x %}...{% endset %} captures its body's output.
      ++i_;
      n->kind = Node::kSetBlock;
      std::string end;
      ASSIGN_OR_RETURN(Body b, ParseBody({"endset"}, &end, pos));
      n->bodies.push_back(std::move(b));
      RETURN_IF_ERROR(ExpectBlockEnd());
      return n;
    }
    RETURN_IF_ERROR(Expect("="));
    ASSIGN_OR_RETURN(ExprPtr value, ParseTuple(true));
    n->exprs.push_back(std::move(value));
    RETURN_IF_ERROR(ExpectBlockEnd());
    return n;
  }

  StatusOr<NodePtr> ParseMacro(int pos) {
    auto n = std::make_unique<Node>();
    n->kind = Node::kMacro;
    n->pos = pos;
    ASSIGN_OR_RETURN(n->text, ExpectName());
    RETURN_IF_ERROR(Expect("("));
    while (!IsOp(")")) {
      ASSIGN_OR_RETURN(std::string name, ExpectName());
      n->names.push_back(std::move(name));
      ExprPtr def;
      if (SkipOp("=")) {
        ASSIGN_OR_RETURN(def, ParseExpression(true));
      } else if (!n->exprs.empty() && n->exprs.back()) {
        return p_.Error(Cur().pos,
                        "a macro parameter without a default follows one with a default");
      }
      n->exprs.push_back(std::move(def));
      if (!SkipOp(",")) break;
    }
    RETURN_IF_ERROR(Expect(")"));
    RETURN_IF_ERROR(ExpectBlockEnd());
    std::string end;
    const int saved = loops_;
    loops_ = 0;
    auto body = ParseBody({"endmacro"}, &end, pos);
    loops_ = saved;
    if (!body.ok()) return body.status();
    n->bodies.push_back(std::move(*body));
    SkipName(n->text);
    RETURN_IF_ERROR(ExpectBlockEnd());
    return n;
  }

  // An expression, or a tuple of them ("a, b"), which Saturn represents as a list.
  StatusOr<ExprPtr> ParseTuple(bool condexpr) {
    const int pos = Cur().pos;
    ASSIGN_OR_RETURN(ExprPtr first, ParseExpression(condexpr));
    if (!IsOp(",")) return first;
    ExprPtr list = New(Expr::kList, pos);
    list->name = "tuple";
    list->args.push_back(std::move(first));
    while (SkipOp(",")) {
      if (Cur().type == Token::kPrintEnd || Cur().type == Token::kBlockEnd) break;
      ASSIGN_OR_RETURN(ExprPtr e, ParseExpression(condexpr));
      list->args.push_back(std::move(e));
    }
    return Done(std::move(list));
  }

  StatusOr<ExprPtr> ParseExpression(bool condexpr) {
    Deeper deeper(depth_);
    if (depth_ > 2 * ChatTemplate::kMaxNesting)
      return p_.Error(Cur().pos, "expression is nested too deeply");
    ASSIGN_OR_RETURN(ExprPtr e, ParseOr());
    if (!condexpr) return e;
    while (IsName("if")) {
      const int pos = Cur().pos;
      ++i_;
      ExprPtr c = New(Expr::kCond, pos);
      ASSIGN_OR_RETURN(ExprPtr cond, ParseOr());
      ExprPtr otherwise;
      if (SkipName("else")) {
        ASSIGN_OR_RETURN(otherwise, ParseExpression(true));
      }
      c->args.push_back(std::move(e));
      c->args.push_back(std::move(cond));
      c->args.push_back(std::move(otherwise));
      ASSIGN_OR_RETURN(e, Done(std::move(c)));
    }
    return e;
  }

  StatusOr<ExprPtr> ParseOr() {
    ASSIGN_OR_RETURN(ExprPtr e, ParseAnd());
    while (IsName("or")) {
      const int pos = t_[i_++].pos;
      ASSIGN_OR_RETURN(ExprPtr r, ParseAnd());
      ASSIGN_OR_RETURN(e, Binary(Expr::kOr, "or", pos, std::move(e), std::move(r)));
    }
    return e;
  }

  StatusOr<ExprPtr> ParseAnd() {
    ASSIGN_OR_RETURN(ExprPtr e, ParseNot());
    while (IsName("and")) {
      const int pos = t_[i_++].pos;
      ASSIGN_OR_RETURN(ExprPtr r, ParseNot());
      ASSIGN_OR_RETURN(e, Binary(Expr::kAnd, "and", pos, std::move(e), std::move(r)));
    }
    return e;
  }

  StatusOr<ExprPtr> ParseNot() {
    if (IsName("not")) {
      Deeper deeper(depth_);
      if (depth_ > 2 * ChatTemplate::kMaxNesting)
        return p_.Error(Cur().pos, "expression is nested too deeply");
      ExprPtr e = New(Expr::kNot, t_[i_++].pos);
      ASSIGN_OR_RETURN(ExprPtr a, ParseNot());
      e->args.push_back(std::move(a));
      return Done(std::move(e));
    }
    return ParseCompare();
  }

  StatusOr<ExprPtr> ParseCompare() {
    const int pos = Cur().pos;
    ASSIGN_OR_RETURN(ExprPtr first, ParseMath1());
    ExprPtr cmp;
    while (true) {
      std::string op;
      if (Cur().type == Token::kOp &&
          (Cur().text == "==" || Cur().text == "!=" || Cur().text == "<" || Cur().text == ">" ||
           Cur().text == "<=" || Cur().text == ">=")) {
        op = Cur().text;
        ++i_;
      } else if (IsName("in")) {
        op = "in";
        ++i_;
      } else if (IsName("not") && Peek().type == Token::kName && Peek().text == "in") {
        op = "not in";
        i_ += 2;
      } else {
        break;
      }
      if (!cmp) {
        cmp = New(Expr::kCompare, pos);
        cmp->args.push_back(std::move(first));
      }
      ASSIGN_OR_RETURN(ExprPtr r, ParseMath1());
      cmp->ops.push_back(std::move(op));
      cmp->args.push_back(std::move(r));
    }
    if (!cmp) return first;
    return Done(std::move(cmp));
  }

  StatusOr<ExprPtr> ParseMath1() {
    ASSIGN_OR_RETURN(ExprPtr e, ParseConcat());
    while (IsOp("+") || IsOp("-")) {
      const Token& t = t_[i_++];
      ASSIGN_OR_RETURN(ExprPtr r, ParseConcat());
      ASSIGN_OR_RETURN(e, Binary(Expr::kBinary, t.text, t.pos, std::move(e), std::move(r)));
    }
    return e;
  }

  StatusOr<ExprPtr> ParseConcat() {
    ASSIGN_OR_RETURN(ExprPtr e, ParseMath2());
    while (IsOp("~")) {
      const Token& t = t_[i_++];
      ASSIGN_OR_RETURN(ExprPtr r, ParseMath2());
      ASSIGN_OR_RETURN(e, Binary(Expr::kBinary, "~", t.pos, std::move(e), std::move(r)));
    }
    return e;
  }

  StatusOr<ExprPtr> ParseMath2() {
    ASSIGN_OR_RETURN(ExprPtr e, ParsePow());
    while (IsOp("*") || IsOp("/") || IsOp("//") || IsOp("%")) {
      const Token& t = t_[i_++];
      ASSIGN_OR_RETURN(ExprPtr r, ParsePow());
      ASSIGN_OR_RETURN(e, Binary(Expr::kBinary, t.text, t.pos, std::move(e), std::move(r)));
    }
    return e;
  }

  StatusOr<ExprPtr> ParsePow() {
    ASSIGN_OR_RETURN(ExprPtr e, ParseUnary(true));
    while (IsOp("**")) {
      const Token& t = t_[i_++];
      ASSIGN_OR_RETURN(ExprPtr r, ParseUnary(true));
      ASSIGN_OR_RETURN(e, Binary(Expr::kBinary, "**", t.pos, std::move(e), std::move(r)));
    }
    return e;
  }

  StatusOr<ExprPtr> ParseUnary(bool with_filter) {
    Deeper deeper(depth_);
    if (depth_ > 2 * ChatTemplate::kMaxNesting)
      return p_.Error(Cur().pos, "expression is nested too deeply");
    ExprPtr e;
    if (IsOp("-") || IsOp("+")) {
      const Token& t = t_[i_++];
      e = New(t.text == "-" ? Expr::kNeg : Expr::kPos, t.pos);
      ASSIGN_OR_RETURN(ExprPtr a, ParseUnary(false));
      e->args.push_back(std::move(a));
      ASSIGN_OR_RETURN(e, Done(std::move(e)));
    } else {
      ASSIGN_OR_RETURN(e, ParsePrimary());
    }
    ASSIGN_OR_RETURN(e, ParsePostfix(std::move(e)));
    if (with_filter) {
      ASSIGN_OR_RETURN(e, ParseFilterExpr(std::move(e)));
    }
    return e;
  }

  StatusOr<ExprPtr> ParsePrimary() {
    const Token& t = Cur();
    switch (t.type) {
      case Token::kName: {
        ++i_;
        ExprPtr e = New(Expr::kConst, t.pos);
        if (t.text == "true" || t.text == "True") {
          e->value = Bool(true);
        } else if (t.text == "false" || t.text == "False") {
          e->value = Bool(false);
        } else if (t.text == "none" || t.text == "None") {
          e->value = None();
        } else {
          e->kind = Expr::kName;
          e->name = t.text;
        }
        return e;
      }
      case Token::kString: {
        // Adjacent literals concatenate, as in Python.
        std::string s;
        while (Cur().type == Token::kString) s += t_[i_++].text;
        ExprPtr e = New(Expr::kConst, t.pos);
        e->value = Str(std::move(s));
        return e;
      }
      case Token::kInt:
      case Token::kFloat: {
        ++i_;
        ExprPtr e = New(Expr::kConst, t.pos);
        e->value = t.type == Token::kInt ? Int(t.i) : Float(t.f);
        return e;
      }
      case Token::kOp:
        if (t.text == "(") {
          ++i_;
          if (SkipOp(")")) {
            ExprPtr empty = New(Expr::kList, t.pos);
            empty->name = "tuple";
            return Done(std::move(empty));
          }
          ASSIGN_OR_RETURN(ExprPtr e, ParseExpression(true));
          if (IsOp(",")) {
            ExprPtr list = New(Expr::kList, t.pos);
            list->name = "tuple";
            list->args.push_back(std::move(e));
            while (SkipOp(",") && !IsOp(")")) {
              ASSIGN_OR_RETURN(ExprPtr x, ParseExpression(true));
              list->args.push_back(std::move(x));
            }
            ASSIGN_OR_RETURN(e, Done(std::move(list)));
          }
          RETURN_IF_ERROR(Expect(")"));
          return e;
        }
        if (t.text == "[") {
          ++i_;
          ExprPtr list = New(Expr::kList, t.pos);
          while (!IsOp("]")) {
            ASSIGN_OR_RETURN(ExprPtr x, ParseExpression(true));
            list->args.push_back(std::move(x));
            if (!SkipOp(",")) break;
          }
          RETURN_IF_ERROR(Expect("]"));
          return Done(std::move(list));
        }
        if (t.text == "{") {
          ++i_;
          ExprPtr dict = New(Expr::kDict, t.pos);
          while (!IsOp("}")) {
            ASSIGN_OR_RETURN(ExprPtr k, ParseExpression(true));
            RETURN_IF_ERROR(Expect(":"));
            ASSIGN_OR_RETURN(ExprPtr v, ParseExpression(true));
            dict->args.push_back(std::move(k));
            dict->args.push_back(std::move(v));
            if (!SkipOp(",")) break;
          }
          RETURN_IF_ERROR(Expect("}"));
          return Done(std::move(dict));
        }
        break;
      default:
        break;
    }
    return Unexpected("an expression");
  }

  StatusOr<ExprPtr> ParsePostfix(ExprPtr e) {
    while (true) {
      const int pos = Cur().pos;
      if (SkipOp(".")) {
        ExprPtr a;
        if (Cur().type == Token::kName) {
          a = New(Expr::kAttr, pos);
          a->name = t_[i_++].text;
        } else if (Cur().type == Token::kInt) {
          a = New(Expr::kItem, pos);
        } else {
          return Unexpected("an attribute name");
        }
        a->args.push_back(std::move(e));
        if (a->kind == Expr::kItem) {
          ExprPtr k = New(Expr::kConst, Cur().pos);
          k->value = Int(t_[i_++].i);
          a->args.push_back(std::move(k));
        }
        ASSIGN_OR_RETURN(e, Done(std::move(a)));
      } else if (SkipOp("[")) {
        ExprPtr parts[3];
        int n = 0;
        bool slice = false;
        while (true) {
          if (!IsOp(":") && !IsOp("]")) {
            ASSIGN_OR_RETURN(parts[n], ParseExpression(true));
          }
          if (n < 2 && SkipOp(":")) {
            slice = true;
            ++n;
            continue;
          }
          break;
        }
        RETURN_IF_ERROR(Expect("]"));
        if (!slice && !parts[0]) return p_.Error(pos, "empty subscript");
        ExprPtr a = New(slice ? Expr::kSlice : Expr::kItem, pos);
        a->args.push_back(std::move(e));
        a->args.push_back(std::move(parts[0]));
        if (slice) {
          a->args.push_back(std::move(parts[1]));
          a->args.push_back(std::move(parts[2]));
        }
        ASSIGN_OR_RETURN(e, Done(std::move(a)));
      } else if (IsOp("(")) {
        ASSIGN_OR_RETURN(e, ParseCall(std::move(e), Expr::kCall, ""));
      } else {
        return e;
      }
    }
  }

  // `(args)` after a callee, or after a filter or test name (then `subject` is its input).
  StatusOr<ExprPtr> ParseCall(ExprPtr subject, Expr::Kind kind, std::string name) {
    const int pos = Cur().pos;
    ExprPtr c = New(kind, pos);
    c->name = std::move(name);
    c->args.push_back(std::move(subject));
    if (SkipOp("(")) {
      while (!IsOp(")")) {
        if (Cur().type == Token::kName && Peek().type == Token::kOp && Peek().text == "=") {
          c->kwnames.push_back(Cur().text);
          i_ += 2;
        } else if (!c->kwnames.empty()) {
          return p_.Error(Cur().pos, "a positional argument follows a keyword argument");
        }
        if (IsOp("*") || IsOp("**"))
          return p_.Error(Cur().pos, "*args and **kwargs are not supported");
        ASSIGN_OR_RETURN(ExprPtr a, ParseExpression(true));
        c->args.push_back(std::move(a));
        if (!SkipOp(",")) break;
      }
      RETURN_IF_ERROR(Expect(")"));
    }
    return Done(std::move(c));
  }

  StatusOr<ExprPtr> ParseFilterExpr(ExprPtr e) {
    while (true) {
      if (IsOp("|")) {
        ++i_;
        const int pos = Cur().pos;
        ASSIGN_OR_RETURN(std::string name, ExpectName());
        if (!KnownFilter(name))
          return p_.Error(pos, absl::StrCat("filter '", name, "' is not supported"));
        ASSIGN_OR_RETURN(e, ParseCall(std::move(e), Expr::kFilter, name));
      } else if (IsName("is")) {
        const int pos = t_[i_++].pos;
        const bool negated = SkipName("not");
        const int name_pos = Cur().pos;
        ASSIGN_OR_RETURN(std::string name, ExpectName());
        if (!KnownTest(name))
          return p_.Error(name_pos, absl::StrCat("test '", name, "' is not supported"));
        if (IsOp("(")) {
          ASSIGN_OR_RETURN(e, ParseCall(std::move(e), Expr::kTest, name));
        } else {
          ExprPtr t = New(Expr::kTest, pos);
          t->name = name;
          t->args.push_back(std::move(e));
          // One bare argument, as in `x is divisibleby 3` or `x is sameas none`.
          const Token& c = Cur();
          const bool arg = (c.type == Token::kName && c.text != "else" && c.text != "or" &&
                            c.text != "and" && c.text != "if" && c.text != "is") ||
                           c.type == Token::kString || c.type == Token::kInt ||
                           c.type == Token::kFloat ||
                           (c.type == Token::kOp && (c.text == "[" || c.text == "{"));
          if (arg) {
            ASSIGN_OR_RETURN(ExprPtr a, ParsePrimary());
            ASSIGN_OR_RETURN(a, ParsePostfix(std::move(a)));
            t->args.push_back(std::move(a));
          }
          ASSIGN_OR_RETURN(e, Done(std::move(t)));
        }
        if (negated) {
          ExprPtr n = New(Expr::kNot, pos);
          n->args.push_back(std::move(e));
          ASSIGN_OR_RETURN(e, Done(std::move(n)));
        }
      } else if (IsOp("(")) {
        ASSIGN_OR_RETURN(e, ParseCall(std::move(e), Expr::kCall, ""));
      } else {
        return e;
      }
    }
  }

  const Program& p_;
  std::vector<Token> t_;
  size_t i_ = 0;
  int depth_ = 0;
  int loops_ = 0;
};

// ---------------------------------------------------------------------------------------------
// Evaluator.

struct Scope {
  Scope* parent = nullptr;
  std::vector<std::pair<std::string, Value>> vars;

  const Value* Find(std::string_view name) const {
    for (const Scope* s = this; s; s = s->parent) {
      for (const auto& [k, v] : s->vars) {
        if (k == name) return &v;
      }
    }
    return nullptr;
  }
  void Set(const std::string& name, Value v) {
    for (auto& [k, old] : vars) {
      if (k == name) {
        old = std::move(v);
        return;
      }
    }
    vars.emplace_back(name, std::move(v));
  }
};

struct Args {
  std::vector<Value> pos;
  std::vector<std::pair<std::string, Value>> kw;

  // The argument at position `i` or named `name`; null when not given.
  const Value* Get(size_t i, std::string_view name) const {
    if (i < pos.size()) return &pos[i];
    for (const auto& [k, v] : kw) {
      if (k == name) return &v;
    }
    return nullptr;
  }
};

bool IsInt(const Value* v) { return v && (v->kind == Value::kInt || v->kind == Value::kBool); }
bool IsStr(const Value* v) { return v && v->kind == Value::kString; }
bool Given(const Value* v) { return v && v->kind != Value::kNone && v->kind != Value::kUndefined; }

// Python's ==. `work` counts what the walk visits; past kMaxSteps it gives up, answering false,
// and the caller (which charges the same counter) reports the overrun, so that comparing huge
// nested lists cannot hang.
bool Equal(const Value& a, const Value& b, long* work) {
  if (++*work > kMaxSteps) return false;
  if (a.numeric() && b.numeric()) {
    if (a.kind == Value::kFloat || b.kind == Value::kFloat) return a.num() == b.num();
    return a.integer() == b.integer();
  }
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case Value::kUndefined:
    case Value::kNone:
      return true;
    case Value::kString:
      *work += static_cast<long>(a.s->size() / 64);
      return *a.s == *b.s;
    case Value::kList:
      if (a.tuple != b.tuple || a.list->size() != b.list->size()) return false;
      if (a.list == b.list) return true;
      for (size_t k = 0; k < a.list->size(); ++k) {
        if (!Equal((*a.list)[k], (*b.list)[k], work)) return false;
      }
      return true;
    case Value::kDict:
      if (a.dict->items.size() != b.dict->items.size()) return false;
      if (a.dict == b.dict) return true;
      for (const auto& [k, v] : a.dict->items) {
        *work += static_cast<long>(b.dict->items.size() / 8);
        const Value* w = b.dict->Find(k);
        if (!w || !Equal(v, *w, work)) return false;
      }
      return true;
    default:
      return a.obj == b.obj;
  }
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

// transformers' tojson: json.dumps(x, ensure_ascii, indent, separators, sort_keys).
struct JsonStyle {
  bool ensure_ascii = false;
  bool indented = false;
  std::string indent;
  std::string item_sep = ", ";
  std::string key_sep = ": ";
  bool sort_keys = false;
};

// False when v holds something JSON cannot carry (*bad names it) or when the text passes the
// output bound (*bad stays null).
bool ToJson(const Value& v, const JsonStyle& st, int level, std::string& out, const Value** bad) {
  if (out.size() > ChatTemplate::kMaxOutputBytes) return false;
  auto newline = [&](int l) {
    out += '\n';
    for (int k = 0; k < l; ++k) out += st.indent;
  };
  switch (v.kind) {
    case Value::kNone:
      out += "null";
      return true;
    case Value::kBool:
      out += v.b ? "true" : "false";
      return true;
    case Value::kInt:
      out += std::to_string(v.i);
      return true;
    case Value::kFloat:
      out += std::isnan(v.f)   ? "NaN"
             : std::isinf(v.f) ? (v.f > 0 ? "Infinity" : "-Infinity")
                               : FloatRepr(v.f);
      return true;
    case Value::kString:
      out += JsonString(*v.s, st.ensure_ascii);
      return true;
    case Value::kList:
      if (v.list->empty()) {
        out += "[]";
        return true;
      }
      out += '[';
      for (size_t k = 0; k < v.list->size(); ++k) {
        if (k) out += st.item_sep;
        if (st.indented) newline(level + 1);
        if (!ToJson((*v.list)[k], st, level + 1, out, bad)) return false;
      }
      if (st.indented) newline(level);
      out += ']';
      return true;
    case Value::kDict: {
      if (v.dict->items.empty()) {
        out += "{}";
        return true;
      }
      std::vector<const std::pair<std::string, Value>*> items;
      for (const auto& kv : v.dict->items) items.push_back(&kv);
      if (st.sort_keys) {
        std::stable_sort(items.begin(), items.end(),
                         [](auto* a, auto* b) { return a->first < b->first; });
      }
      out += '{';
      for (size_t k = 0; k < items.size(); ++k) {
        if (k) out += st.item_sep;
        if (st.indented) newline(level + 1);
        absl::StrAppend(&out, JsonString(items[k]->first, st.ensure_ascii), st.key_sep);
        if (!ToJson(items[k]->second, st, level + 1, out, bad)) return false;
      }
      if (st.indented) newline(level);
      out += '}';
      return true;
    }
    default:
      *bad = &v;
      return false;
  }
}

const std::string_view kStrMethods[] = {
    "strip",      "lstrip",  "rstrip",  "startswith", "endswith", "split",   "upper",
    "lower",      "replace", "title",   "capitalize", "find",     "count",   "join",
    "splitlines", "isdigit", "isalpha", "isspace",    "isalnum",  "islower", "isupper"};
const std::string_view kDictMethods[] = {"items", "keys", "values", "get"};
const std::string_view kListMethods[] = {"count", "index"};  // the sandbox allows no mutation

bool IsMethod(const Value& v, std::string_view name) {
  if (v.kind == Value::kString) return Known(name, std::begin(kStrMethods), std::end(kStrMethods));
  if (v.kind == Value::kDict) return Known(name, std::begin(kDictMethods), std::end(kDictMethods));
  if (v.kind == Value::kList) return Known(name, std::begin(kListMethods), std::end(kListMethods));
  if (v.kind == Value::kLoop) return name == "cycle";
  return false;
}

class Renderer {
 public:
  explicit Renderer(const Program& p) : p_(p) {}

  Scope* NewScope(Scope* parent) {
    scopes_.emplace_back();
    scopes_.back().parent = parent;
    return &scopes_.back();
  }

  Value Global(std::string name) {
    callables_.emplace_back();
    callables_.back().name = std::move(name);
    return CallableValue(&callables_.back());
  }

  absl::Status Exec(const Body& body, Scope* scope, std::string& out) {
    for (const NodePtr& np : body) {
      const Node& n = *np;
      switch (n.kind) {
        case Node::kText:
          out += n.text;
          break;
        case Node::kPrint: {
          ASSIGN_OR_RETURN(Value v, Eval(*n.exprs[0], scope));
          out += ToStr(v);
          break;
        }
        case Node::kIf: {
          size_t k = 0;
          for (; k < n.exprs.size(); ++k) {
            ASSIGN_OR_RETURN(Value c, Eval(*n.exprs[k], scope));
            if (Truthy(c)) break;
          }
          if (k < n.bodies.size()) RETURN_IF_ERROR(Exec(n.bodies[k], scope, out));
          break;
        }
        case Node::kFor:
          RETURN_IF_ERROR(For(n, scope, out));
          break;
        case Node::kSet:
          RETURN_IF_ERROR(Set(n, scope));
          break;
        case Node::kSetBlock: {
          std::string captured;
          RETURN_IF_ERROR(Exec(n.bodies[0], scope, captured));
          scope->Set(n.text, Str(std::move(captured)));
          break;
        }
        case Node::kMacro: {
          callables_.emplace_back();
          Callable& c = callables_.back();
          c.kind = Callable::kMacro;
          c.name = n.text;
          c.macro = &n;
          c.closure = scope;
          scope->Set(n.text, CallableValue(&c));
          break;
        }
        case Node::kBreak:
          control_ = kBreak;
          return absl::OkStatus();
        case Node::kContinue:
          control_ = kContinue;
          return absl::OkStatus();
      }
      if (out.size() > ChatTemplate::kMaxOutputBytes) {
        return Err(n.pos,
                   absl::StrCat("the output exceeds ", ChatTemplate::kMaxOutputBytes, " bytes"));
      }
      if (control_ != kNone) return absl::OkStatus();
    }
    return absl::OkStatus();
  }

 private:
  enum Control { kNone, kBreak, kContinue };

  absl::Status Err(int pos, std::string_view msg) const { return p_.Error(pos, msg); }
  // Using an undefined value where jinja2's Undefined raises: its message says what it was.
  absl::Status UndefinedErr(const Value& v, int pos) const { return Err(pos, *v.s); }
  absl::Status TypeErr(int pos, std::string_view msg) const {
    return Err(pos, absl::StrCat("TypeError: ", std::string(msg)));
  }

  // Counts work so that no template runs unbounded.
  absl::Status Charge(size_t units, int pos) {
    steps_ += static_cast<long>(units);
    if (steps_ > kMaxSteps)
      return Err(pos, "the template does too much work (more than 20M steps)");
    return absl::OkStatus();
  }
  StatusOr<Value> MakeStr(std::string s, int pos) {
    if (s.size() > ChatTemplate::kMaxOutputBytes) {
      return Err(pos, absl::StrCat("a string exceeds ", ChatTemplate::kMaxOutputBytes, " bytes"));
    }
    RETURN_IF_ERROR(Charge(s.size() / 64, pos));
    return Str(std::move(s));
  }
  StatusOr<Value> MakeListAt(List l, int pos, bool tuple = false) {
    if (l.size() > static_cast<size_t>(ChatTemplate::kMaxLoopIterations)) {
      return Err(pos, "a list exceeds 1000000 items");
    }
    RETURN_IF_ERROR(Charge(l.size() / 4, pos));
    Value v = MakeList(std::move(l), tuple);
    if (v.depth > kMaxValueDepth) return Err(pos, "lists and dicts are nested too deeply");
    return v;
  }
  StatusOr<Value> MakeDictAt(Dict d, int pos) {
    RETURN_IF_ERROR(Charge(d.items.size() / 4, pos));
    Value v = MakeDict(std::move(d));
    if (v.depth > kMaxValueDepth) return Err(pos, "lists and dicts are nested too deeply");
    return v;
  }
  static Value CallableValue(Callable* c) {
    Value v;
    v.kind = Value::kCallable;
    v.obj = c;
    return v;
  }

  // What `for x in v` walks: a list's items, a dict's keys, a string's characters.
  StatusOr<std::shared_ptr<const List>> Iterate(const Value& v, int pos) {
    switch (v.kind) {
      case Value::kUndefined:
        return std::make_shared<const List>();
      case Value::kList:
        return v.list;
      case Value::kDict: {
        List l;
        for (const auto& [k, x] : v.dict->items) l.push_back(Str(k));
        RETURN_IF_ERROR(Charge(l.size() / 4, pos));
        return std::make_shared<const List>(std::move(l));
      }
      case Value::kString: {
        List l;
        for (size_t i = 0; i < v.s->size();) {
          const size_t b = i;
          NextCp(*v.s, i);
          l.push_back(Str(v.s->substr(b, i - b)));
        }
        RETURN_IF_ERROR(Charge(l.size() / 4, pos));
        return std::make_shared<const List>(std::move(l));
      }
      case Value::kLoop:
        return static_cast<LoopState*>(v.obj)->items;
      default:
        return TypeErr(pos, absl::StrCat("'", TypeName(v), "' object is not iterable"));
    }
  }

  absl::Status Bind(const std::vector<std::string>& names, const Value& item, Scope* s, int pos) {
    if (names.size() == 1) {
      s->Set(names[0], item);
      return absl::OkStatus();
    }
    if (item.kind == Value::kUndefined) return UndefinedErr(item, pos);
    ASSIGN_OR_RETURN(auto parts, Iterate(item, pos));
    if (parts->size() != names.size()) {
      return Err(pos, parts->size() < names.size()
                          ? absl::StrCat("ValueError: not enough values to unpack (expected ",
                                         names.size(), ", got ", parts->size(), ")")
                          : absl::StrCat("ValueError: too many values to unpack (expected ",
                                         names.size(), ")"));
    }
    for (size_t k = 0; k < names.size(); ++k) s->Set(names[k], (*parts)[k]);
    return absl::OkStatus();
  }

  absl::Status For(const Node& n, Scope* scope, std::string& out) {
    ASSIGN_OR_RETURN(Value iterable, Eval(*n.exprs[0], scope));
    ASSIGN_OR_RETURN(std::shared_ptr<const List> items, Iterate(iterable, n.exprs[0]->pos));
    // One scope per loop, emptied each iteration: what the body sets does not outlive its
    // iteration, as in jinja2.
    Scope* s = NewScope(scope);
    if (n.exprs[1]) {
      List kept;
      for (const Value& item : *items) {
        RETURN_IF_ERROR(Tick(n.pos));
        s->vars.clear();
        RETURN_IF_ERROR(Bind(n.names, item, s, n.pos));
        ASSIGN_OR_RETURN(Value c, Eval(*n.exprs[1], s));
        if (Truthy(c)) kept.push_back(item);
      }
      items = std::make_shared<const List>(std::move(kept));
    }
    if (items->empty()) {
      s->vars.clear();
      return Exec(n.bodies[1], s, out);
    }
    loops_.emplace_back();
    LoopState* loop = &loops_.back();
    loop->items = items;
    Value lv;
    lv.kind = Value::kLoop;
    lv.obj = loop;
    for (size_t k = 0; k < items->size(); ++k) {
      RETURN_IF_ERROR(Tick(n.pos));
      loop->index0 = k;
      s->vars.clear();
      s->Set("loop", lv);
      RETURN_IF_ERROR(Bind(n.names, (*items)[k], s, n.pos));
      RETURN_IF_ERROR(Exec(n.bodies[0], s, out));
      const Control c = control_;
      control_ = kNone;
      if (c == kBreak) break;
    }
    return absl::OkStatus();
  }

  absl::Status Tick(int pos) {
    if (++iterations_ > ChatTemplate::kMaxLoopIterations) {
      return Err(pos, absl::StrCat("loops ran more than ", ChatTemplate::kMaxLoopIterations,
                                   " iterations"));
    }
    return Charge(1, pos);
  }

  absl::Status Set(const Node& n, Scope* scope) {
    ASSIGN_OR_RETURN(Value v, Eval(*n.exprs[0], scope));
    if (!n.attr.empty()) {
      const Value* target = scope->Find(n.text);
      if (!target || target->kind != Value::kNamespace) {
        return Err(n.pos, absl::StrCat("cannot assign attribute on non-namespace object: '", n.text,
                                       "' is not a namespace()"));
      }
      static_cast<Namespace*>(target->obj)->attrs.Set(n.attr, std::move(v));
      return absl::OkStatus();
    }
    if (!n.names.empty()) return Bind(n.names, v, scope, n.pos);
    scope->Set(n.text, std::move(v));
    return absl::OkStatus();
  }

  StatusOr<Value> Eval(const Expr& e, Scope* scope) {
    RETURN_IF_ERROR(Charge(1, e.pos));
    switch (e.kind) {
      case Expr::kConst:
        return e.value;
      case Expr::kName: {
        if (const Value* v = scope->Find(e.name)) return *v;
        return Undefined(absl::StrCat("'", e.name, "' is undefined"));
      }
      case Expr::kList: {
        List l;
        for (const auto& a : e.args) {
          ASSIGN_OR_RETURN(Value v, Eval(*a, scope));
          l.push_back(std::move(v));
        }
        return MakeListAt(std::move(l), e.pos, e.name == "tuple");
      }
      case Expr::kDict: {
        Dict d;
        for (size_t k = 0; k < e.args.size(); k += 2) {
          ASSIGN_OR_RETURN(Value key, Eval(*e.args[k], scope));
          ASSIGN_OR_RETURN(Value v, Eval(*e.args[k + 1], scope));
          if (key.kind != Value::kString) return Err(e.args[k]->pos, "dict keys must be strings");
          d.Set(*key.s, std::move(v));
        }
        return MakeDictAt(std::move(d), e.pos);
      }
      case Expr::kAttr: {
        ASSIGN_OR_RETURN(Value obj, Eval(*e.args[0], scope));
        return GetAttr(obj, e.name, e.pos);
      }
      case Expr::kItem: {
        ASSIGN_OR_RETURN(Value obj, Eval(*e.args[0], scope));
        ASSIGN_OR_RETURN(Value key, Eval(*e.args[1], scope));
        return GetItem(obj, key, e.pos);
      }
      case Expr::kSlice: {
        ASSIGN_OR_RETURN(Value obj, Eval(*e.args[0], scope));
        Value bounds[3] = {None(), None(), None()};
        for (int k = 0; k < 3; ++k) {
          if (e.args[k + 1]) {
            ASSIGN_OR_RETURN(bounds[k], Eval(*e.args[k + 1], scope));
          }
        }
        return Slice(obj, bounds, e.pos);
      }
      case Expr::kCall: {
        Args args;
        RETURN_IF_ERROR(EvalArgs(e, scope, args));
        const Expr& callee = *e.args[0];
        if (callee.kind == Expr::kAttr) {
          // obj.method(...) calls the method directly rather than building a bound method.
          ASSIGN_OR_RETURN(Value obj, Eval(*callee.args[0], scope));
          if (IsMethod(obj, callee.name)) {
            return CallMethod(obj, callee.name, args, e.pos);
          }
          ASSIGN_OR_RETURN(Value f, GetAttr(obj, callee.name, callee.pos));
          return Call(f, args, e.pos);
        }
        ASSIGN_OR_RETURN(Value f, Eval(callee, scope));
        return Call(f, args, e.pos);
      }
      case Expr::kFilter: {
        ASSIGN_OR_RETURN(Value v, Eval(*e.args[0], scope));
        Args args;
        RETURN_IF_ERROR(EvalArgs(e, scope, args));
        return Filter(e.name, v, args, e.pos);
      }
      case Expr::kTest: {
        ASSIGN_OR_RETURN(Value v, Eval(*e.args[0], scope));
        Args args;
        RETURN_IF_ERROR(EvalArgs(e, scope, args));
        ASSIGN_OR_RETURN(bool r, Test(e.name, v, args, e.pos));
        return Bool(r);
      }
      case Expr::kNeg:
      case Expr::kPos: {
        ASSIGN_OR_RETURN(Value v, Eval(*e.args[0], scope));
        const bool neg = e.kind == Expr::kNeg;
        if (v.kind == Value::kUndefined) return UndefinedErr(v, e.pos);
        if (v.kind == Value::kFloat) return Float(neg ? -v.f : v.f);
        if (v.numeric()) {
          if (neg && v.integer() == INT64_MIN) return Err(e.pos, "integer overflow");
          return Int(neg ? -v.integer() : v.integer());
        }
        return TypeErr(e.pos, absl::StrCat("bad operand type for unary ", neg ? "-" : "+", ": '",
                                           TypeName(v), "'"));
      }
      case Expr::kNot: {
        ASSIGN_OR_RETURN(Value v, Eval(*e.args[0], scope));
        return Bool(!Truthy(v));
      }
      case Expr::kBinary: {
        ASSIGN_OR_RETURN(Value a, Eval(*e.args[0], scope));
        ASSIGN_OR_RETURN(Value b, Eval(*e.args[1], scope));
        return BinaryOp(e.name, a, b, e.pos);
      }
      case Expr::kCompare: {
        ASSIGN_OR_RETURN(Value left, Eval(*e.args[0], scope));
        for (size_t k = 0; k < e.ops.size(); ++k) {
          ASSIGN_OR_RETURN(Value right, Eval(*e.args[k + 1], scope));
          ASSIGN_OR_RETURN(bool r, Compare(e.ops[k], left, right, e.args[k + 1]->pos));
          if (!r) return Bool(false);
          left = std::move(right);
        }
        return Bool(true);
      }
      case Expr::kAnd:
      case Expr::kOr: {
        ASSIGN_OR_RETURN(Value a, Eval(*e.args[0], scope));
        if (Truthy(a) == (e.kind == Expr::kOr)) return a;
        return Eval(*e.args[1], scope);
      }
      case Expr::kCond: {
        ASSIGN_OR_RETURN(Value c, Eval(*e.args[1], scope));
        if (Truthy(c)) return Eval(*e.args[0], scope);
        if (e.args[2]) return Eval(*e.args[2], scope);
        return Undefined(
            "the inline if-expression evaluated to false and no else section was defined");
      }
    }
    return Err(e.pos, "internal error: unknown expression");
  }

  absl::Status EvalArgs(const Expr& e, Scope* scope, Args& args) {
    const size_t first_kw = e.args.size() - e.kwnames.size();
    for (size_t k = 1; k < e.args.size(); ++k) {
      ASSIGN_OR_RETURN(Value v, Eval(*e.args[k], scope));
      if (k < first_kw) {
        args.pos.push_back(std::move(v));
      } else {
        args.kw.emplace_back(e.kwnames[k - first_kw], std::move(v));
      }
    }
    return absl::OkStatus();
  }

  // jinja2's environment.getattr: an attribute (a method, a namespace's or loop's field), else
  // the item of that name, else undefined.
  StatusOr<Value> GetAttr(const Value& obj, const std::string& name, int pos) {
    switch (obj.kind) {
      case Value::kUndefined:
        return UndefinedErr(obj, pos);
      case Value::kDict: {
        if (IsMethod(obj, name)) return BoundMethod(obj, name);
        RETURN_IF_ERROR(Charge(obj.dict->items.size() / 8, pos));
        if (const Value* v = obj.dict->Find(name)) return *v;
        break;
      }
      case Value::kNamespace:
        if (const Value* v = static_cast<Namespace*>(obj.obj)->attrs.Find(name)) return *v;
        break;
      case Value::kLoop: {
        const LoopState& l = *static_cast<LoopState*>(obj.obj);
        const int64_t i = static_cast<int64_t>(l.index0), n = static_cast<int64_t>(l.items->size());
        if (name == "index") return Int(i + 1);
        if (name == "index0") return Int(i);
        if (name == "revindex") return Int(n - i);
        if (name == "revindex0") return Int(n - i - 1);
        if (name == "first") return Bool(i == 0);
        if (name == "last") return Bool(i == n - 1);
        if (name == "length") return Int(n);
        if (name == "depth") return Int(1);
        if (name == "depth0") return Int(0);
        if (name == "previtem")
          return i > 0 ? (*l.items)[i - 1] : Undefined("there is no previous item");
        if (name == "nextitem")
          return i + 1 < n ? (*l.items)[i + 1] : Undefined("there is no next item");
        if (name == "cycle") return BoundMethod(obj, name);
        break;
      }
      default:
        if (IsMethod(obj, name)) return BoundMethod(obj, name);
        break;
    }
    return Undefined(absl::StrCat("'", TypeName(obj), " object' has no attribute '", name, "'"));
  }

  Value BoundMethod(const Value& obj, const std::string& name) {
    callables_.emplace_back();
    Callable& c = callables_.back();
    c.kind = Callable::kMethod;
    c.name = name;
    c.self = obj;
    return CallableValue(&c);
  }

  // jinja2's environment.getitem: the item, else the attribute of that name, else undefined.
  StatusOr<Value> GetItem(const Value& obj, const Value& key, int pos) {
    if (obj.kind == Value::kUndefined) return UndefinedErr(obj, pos);
    if (IsInt(&key) && (obj.kind == Value::kList || obj.kind == Value::kString)) {
      int64_t i = key.integer();
      if (obj.kind == Value::kList) {
        const int64_t n = static_cast<int64_t>(obj.list->size());
        if (i < 0) i += n;
        if (i >= 0 && i < n) return (*obj.list)[i];
      } else {
        const std::vector<uint32_t> cps = Cps(*obj.s);
        RETURN_IF_ERROR(Charge(cps.size() / 64, pos));
        const int64_t n = static_cast<int64_t>(cps.size());
        if (i < 0) i += n;
        if (i >= 0 && i < n) return Str(FromCps(&cps[i], &cps[i] + 1));
      }
    }
    if (key.kind == Value::kString) {
      if (obj.kind == Value::kDict) {
        RETURN_IF_ERROR(Charge(obj.dict->items.size() / 8, pos));
        if (const Value* v = obj.dict->Find(*key.s)) return *v;
      }
      return GetAttr(obj, *key.s, pos);
    }
    return Undefined(absl::StrCat("'", TypeName(obj), " object' has no element ", Repr(key)));
  }

  // Python's obj[start:stop:step]. jinja2 compiles slices to plain Python subscripts, bypassing
  // its lenient getitem, so a bad slice is an error rather than undefined.
  StatusOr<Value> Slice(const Value& obj, const Value* b, int pos) {
    if (obj.kind == Value::kUndefined) return UndefinedErr(obj, pos);
    if (obj.kind == Value::kDict) return TypeErr(pos, "unhashable type: 'slice'");
    if (obj.kind != Value::kList && obj.kind != Value::kString) {
      return TypeErr(pos, absl::StrCat("'", TypeName(obj), "' object is not subscriptable"));
    }
    for (int k = 0; k < 3; ++k) {
      if (b[k].kind != Value::kNone && !IsInt(&b[k])) {
        return TypeErr(pos, "slice indices must be integers or None or have an __index__ method");
      }
    }
    const int64_t step = b[2].kind == Value::kNone ? 1 : b[2].integer();
    if (step == 0) return Err(pos, "ValueError: slice step cannot be zero");
    std::vector<uint32_t> cps;
    if (obj.kind == Value::kString) cps = Cps(*obj.s);
    const int64_t n = obj.kind == Value::kList ? static_cast<int64_t>(obj.list->size())
                                               : static_cast<int64_t>(cps.size());
    auto adjust = [&](const Value& v, int64_t dflt) {
      if (v.kind == Value::kNone) return dflt;
      int64_t x = v.integer();
      if (x < 0) x = std::max<int64_t>(x + n, step < 0 ? -1 : 0);
      if (x >= n) x = step < 0 ? n - 1 : n;
      return x;
    };
    const int64_t start = adjust(b[0], step < 0 ? n - 1 : 0);
    const int64_t stop = adjust(b[1], step < 0 ? -1 : n);
    RETURN_IF_ERROR(Charge(static_cast<size_t>(n) / 4, pos));
    if (obj.kind == Value::kList) {
      List l;
      for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step)
        l.push_back((*obj.list)[i]);
      return MakeList(std::move(l), obj.tuple);
    }
    std::string s;
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) AppendCp(s, cps[i]);
    return Str(std::move(s));
  }

  StatusOr<Value> Call(const Value& f, const Args& args, int pos) {
    if (f.kind == Value::kUndefined) return UndefinedErr(f, pos);
    if (f.kind != Value::kCallable)
      return TypeErr(pos, absl::StrCat("'", TypeName(f), "' object is not callable"));
    const Callable& c = *static_cast<Callable*>(f.obj);
    switch (c.kind) {
      case Callable::kGlobal:
        return CallGlobal(c.name, args, pos);
      case Callable::kMethod:
        return CallMethod(c.self, c.name, args, pos);
      case Callable::kMacro:
        return CallMacro(c, args, pos);
    }
    return Err(pos, "internal error: unknown callable");
  }

  StatusOr<Value> CallMacro(const Callable& c, const Args& args, int pos) {
    const Node& m = *c.macro;
    if (args.pos.size() > m.names.size()) {
      return TypeErr(pos, absl::StrCat("macro '", m.text, "' takes not more than ", m.names.size(),
                                       " argument(s)"));
    }
    for (const auto& [k, v] : args.kw) {
      if (std::find(m.names.begin(), m.names.end(), k) == m.names.end()) {
        return TypeErr(pos,
                       absl::StrCat("macro '", m.text, "' takes no keyword argument '", k, "'"));
      }
    }
    if (depth_ >= kMaxMacroDepth) return Err(pos, "macros call each other too deeply");
    Scope* s = NewScope(c.closure);
    for (size_t k = 0; k < m.names.size(); ++k) {
      if (const Value* v = args.Get(k, m.names[k])) {
        s->Set(m.names[k], *v);
      } else if (m.exprs[k]) {
        ASSIGN_OR_RETURN(Value d, Eval(*m.exprs[k], s));
        s->Set(m.names[k], std::move(d));
      } else {
        s->Set(m.names[k],
               Undefined(absl::StrCat("parameter '", m.names[k], "' was not provided")));
      }
    }
    std::string out;
    ++depth_;
    absl::Status st = Exec(m.bodies[0], s, out);
    --depth_;
    RETURN_IF_ERROR(st);
    return Str(std::move(out));
  }

  StatusOr<Value> CallGlobal(const std::string& name, const Args& args, int pos) {
    if (name == "raise_exception") {
      // transformers raises TemplateError(message): the message is the whole error.
      const Value* msg = args.Get(0, "message");
      return absl::InvalidArgumentError(msg ? ToStr(*msg)
                                            : "raise_exception() called without a message");
    }
    if (name == "range") {
      int64_t start = 0, stop = 0, step = 1;
      for (const Value& v : args.pos) {
        if (!IsInt(&v))
          return TypeErr(
              pos, absl::StrCat("'", TypeName(v), "' object cannot be interpreted as an integer"));
      }
      if (args.pos.size() == 1) {
        stop = args.pos[0].integer();
      } else if (args.pos.size() == 2 || args.pos.size() == 3) {
        start = args.pos[0].integer();
        stop = args.pos[1].integer();
        if (args.pos.size() == 3) step = args.pos[2].integer();
      } else {
        return TypeErr(pos, "range expected 1 to 3 integer arguments");
      }
      if (step == 0) return Err(pos, "ValueError: range() arg 3 must not be zero");
      const double count = std::ceil((static_cast<double>(stop) - static_cast<double>(start)) /
                                     static_cast<double>(step));
      if (count > kMaxRange)
        return Err(pos, absl::StrCat("range() of more than ", kMaxRange, " items is not allowed"));
      List l;
      for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) l.push_back(Int(i));
      return MakeListAt(std::move(l), pos);
    }
    if (name == "namespace" || name == "dict") {
      Dict d;
      for (const Value& v : args.pos) {
        if (v.kind != Value::kDict)
          return TypeErr(pos, absl::StrCat(name, "() takes only a dict as a positional argument"));
        for (const auto& [k, x] : v.dict->items) d.Set(k, x);
      }
      for (const auto& [k, x] : args.kw) d.Set(k, x);
      if (name == "dict") return MakeDictAt(std::move(d), pos);
      namespaces_.emplace_back();
      namespaces_.back().attrs = std::move(d);
      Value v;
      v.kind = Value::kNamespace;
      v.obj = &namespaces_.back();
      return v;
    }
    if (name == "strftime_now") {
      const Value* fmt = args.Get(0, "format");
      if (!IsStr(fmt)) return TypeErr(pos, "strftime_now() takes a format string");
      const std::time_t now = std::time(nullptr);
      std::tm tm{};
      localtime_r(&now, &tm);
      char buf[512];
      const size_t n = std::strftime(buf, sizeof(buf), fmt->s->c_str(), &tm);
      return Str(std::string(buf, n));
    }
    return Err(pos, absl::StrCat("internal error: unknown global '", name, "'"));
  }

  StatusOr<Value> CallMethod(const Value& self, const std::string& name, const Args& a, int pos) {
    if (self.kind == Value::kLoop) {
      if (a.pos.empty()) return TypeErr(pos, "no items for cycling given");
      return a.pos[static_cast<LoopState*>(self.obj)->index0 % a.pos.size()];
    }
    if (self.kind == Value::kList) {
      const Value* x = a.Get(0, "value");
      if (!x) return TypeErr(pos, absl::StrCat(name, "() takes exactly one argument (0 given)"));
      RETURN_IF_ERROR(Charge(self.list->size() / 4, pos));
      int64_t n = 0;
      for (size_t k = 0; k < self.list->size(); ++k) {
        if (!Equal((*self.list)[k], *x, &steps_)) continue;
        if (name == "index") return Int(static_cast<int64_t>(k));
        ++n;
      }
      RETURN_IF_ERROR(Charge(0, pos));
      if (name == "index") {
        return Err(pos, absl::StrCat("ValueError: ", Repr(*x), " is not in list"));
      }
      return Int(n);
    }
    if (self.kind == Value::kDict) {
      const Dict& d = *self.dict;
      RETURN_IF_ERROR(Charge(d.items.size() / 4, pos));
      if (name == "get") {
        const Value* key = a.Get(0, "key");
        if (!key) return TypeErr(pos, "get expected at least 1 argument, got 0");
        const Value* v = IsStr(key) ? d.Find(*key->s) : nullptr;
        if (v) return *v;
        const Value* dflt = a.Get(1, "default");
        return dflt ? *dflt : None();
      }
      List l;
      for (const auto& [k, v] : d.items) {
        if (name == "keys") {
          l.push_back(Str(k));
        } else if (name == "values") {
          l.push_back(v);
        } else {
          l.push_back(MakeList({Str(k), v}, /*tuple=*/true));
        }
      }
      return MakeList(std::move(l));
    }
    // A str method.
    const std::string& s = *self.s;
    RETURN_IF_ERROR(Charge(s.size() / 64, pos));
    auto str_arg = [&](size_t i, std::string_view n, const std::string** out) -> absl::Status {
      const Value* v = a.Get(i, n);
      *out = nullptr;
      if (!v || v->kind == Value::kNone) return absl::OkStatus();
      if (v->kind != Value::kString) {
        return TypeErr(pos,
                       absl::StrCat(name, "() argument must be str or None, not ", TypeName(*v)));
      }
      *out = v->s.get();
      return absl::OkStatus();
    };
    if (name == "strip" || name == "lstrip" || name == "rstrip") {
      const std::string* chars;
      RETURN_IF_ERROR(str_arg(0, "chars", &chars));
      return Str(Strip(s, chars, name != "rstrip", name != "lstrip"));
    }
    if (name == "startswith" || name == "endswith") {
      const Value* p = a.Get(0, "prefix");
      if (!p) return TypeErr(pos, absl::StrCat(name, "() takes at least 1 argument (0 given)"));
      std::vector<std::string> cands;
      if (p->kind == Value::kString) {
        cands.push_back(*p->s);
      } else if (p->kind == Value::kList) {
        for (const Value& x : *p->list) {
          if (x.kind != Value::kString)
            return TypeErr(pos, absl::StrCat(name, "() tuple items must be str"));
          cands.push_back(*x.s);
        }
      } else {
        return TypeErr(pos, absl::StrCat(name, " first arg must be str or a tuple of str, not ",
                                         TypeName(*p)));
      }
      for (const std::string& c : cands) {
        if (c.size() <= s.size() &&
            (name == "startswith" ? s.compare(0, c.size(), c) == 0
                                  : s.compare(s.size() - c.size(), c.size(), c) == 0)) {
          return Bool(true);
        }
      }
      return Bool(false);
    }
    if (name == "split") {
      const std::string* sep;
      RETURN_IF_ERROR(str_arg(0, "sep", &sep));
      if (sep && sep->empty()) return Err(pos, "ValueError: empty separator");
      const Value* m = a.Get(1, "maxsplit");
      List l;
      for (std::string& part : Split(s, sep, IsInt(m) ? m->integer() : -1))
        l.push_back(Str(std::move(part)));
      return MakeListAt(std::move(l), pos);
    }
    if (name == "splitlines") {
      List l;
      for (std::string& line : SplitLines(s)) l.push_back(Str(std::move(line)));
      return MakeListAt(std::move(l), pos);
    }
    if (name == "upper") return Str(MapCase(s, Upper));
    if (name == "lower") return Str(MapCase(s, Lower));
    if (name == "title") return Str(PyTitle(s));
    if (name == "capitalize") return Str(PyCapitalize(s));
    if (name == "replace") {
      const Value* old = a.Get(0, "old");
      const Value* with = a.Get(1, "new");
      const Value* count = a.Get(2, "count");
      if (!IsStr(old) || !IsStr(with)) return TypeErr(pos, "replace() arguments must be str");
      return MakeStr(Replace(s, *old->s, *with->s, IsInt(count) ? count->integer() : -1), pos);
    }
    if (name == "find" || name == "count") {
      const Value* sub = a.Get(0, "sub");
      if (!IsStr(sub)) return TypeErr(pos, absl::StrCat(name, "() argument must be str"));
      if (name == "find") {
        const size_t at = s.find(*sub->s);
        return Int(at == std::string::npos ? -1
                                           : static_cast<int64_t>(Cps(s.substr(0, at)).size()));
      }
      if (sub->s->empty()) return Int(static_cast<int64_t>(Cps(s).size()) + 1);
      int64_t n = 0;
      for (size_t at = s.find(*sub->s); at != std::string::npos;
           at = s.find(*sub->s, at + sub->s->size()))
        ++n;
      return Int(n);
    }
    if (name == "join") {
      const Value* items = a.Get(0, "iterable");
      if (!items) return TypeErr(pos, "join() takes exactly one argument (0 given)");
      ASSIGN_OR_RETURN(auto l, Iterate(*items, pos));
      std::string out;
      for (size_t k = 0; k < l->size(); ++k) {
        if ((*l)[k].kind != Value::kString) {
          return TypeErr(pos, absl::StrCat("sequence item ", k, ": expected str instance, ",
                                           TypeName((*l)[k]), " found"));
        }
        absl::StrAppend(&out, k ? s : "", *(*l)[k].s);
        if (out.size() > ChatTemplate::kMaxOutputBytes) break;
      }
      return MakeStr(std::move(out), pos);
    }
    // The is*() predicates, ASCII-only like the case mappings.
    bool any = false, all = true, cased_lower = false, cased_upper = false;
    for (size_t i = 0; i < s.size();) {
      const uint32_t c = NextCp(s, i);
      any = true;
      const bool digit = c >= '0' && c <= '9';
      if (name == "isdigit") all = all && digit;
      if (name == "isalpha") all = all && IsAlpha(c);
      if (name == "isalnum") all = all && (IsAlpha(c) || digit);
      if (name == "isspace") all = all && IsSpace(c);
      cased_lower = cased_lower || Upper(c) != c;
      cased_upper = cased_upper || Lower(c) != c;
    }
    if (name == "islower") return Bool(cased_lower && !cased_upper);
    if (name == "isupper") return Bool(cased_upper && !cased_lower);
    return Bool(any && all);
  }

  // Python's + - * / // % ** and jinja2's ~.
  StatusOr<Value> BinaryOp(const std::string& op, const Value& a, const Value& b, int pos) {
    if (op == "~") return MakeStr(ToStr(a) + ToStr(b), pos);
    if (a.kind == Value::kUndefined) return UndefinedErr(a, pos);
    if (b.kind == Value::kUndefined) return UndefinedErr(b, pos);
    auto unsupported = [&]() {
      return TypeErr(pos, absl::StrCat("unsupported operand type(s) for ", op, ": '", TypeName(a),
                                       "' and '", TypeName(b), "'"));
    };
    if (a.numeric() && b.numeric()) {
      const bool ints = a.kind != Value::kFloat && b.kind != Value::kFloat;
      const int64_t x = a.integer(), y = b.integer();
      const double fx = a.num(), fy = b.num();
      int64_t r = 0;
      if (op == "+") {
        if (!ints) return Float(fx + fy);
        if (__builtin_add_overflow(x, y, &r)) return Err(pos, "integer overflow");
        return Int(r);
      }
      if (op == "-") {
        if (!ints) return Float(fx - fy);
        if (__builtin_sub_overflow(x, y, &r)) return Err(pos, "integer overflow");
        return Int(r);
      }
      if (op == "*") {
        if (!ints) return Float(fx * fy);
        if (__builtin_mul_overflow(x, y, &r)) return Err(pos, "integer overflow");
        return Int(r);
      }
      if (op == "/") {
        if (fy == 0) return Err(pos, "ZeroDivisionError: division by zero");
        return Float(fx / fy);
      }
      if (op == "//" || op == "%") {
        if (ints ? y == 0 : fy == 0)
          return Err(pos, "ZeroDivisionError: integer division or modulo by zero");
        if (ints) {
          if (x == INT64_MIN && y == -1) return Err(pos, "integer overflow");
          int64_t q = x / y, m = x % y;
          if (m != 0 && ((m < 0) != (y < 0))) {
            --q;
            m += y;
          }
          return Int(op == "//" ? q : m);
        }
        // CPython's float_divmod, so that signs and rounding match.
        double mod = std::fmod(fx, fy);
        double div = (fx - mod) / fy;
        if (mod != 0) {
          if ((fy < 0) != (mod < 0)) {
            mod += fy;
            div -= 1.0;
          }
        } else {
          mod = std::copysign(0.0, fy);
        }
        if (op == "%") return Float(mod);
        if (div == 0) return Float(std::copysign(0.0, fx / fy));
        double floordiv = std::floor(div);
        if (div - floordiv > 0.5) floordiv += 1.0;
        return Float(floordiv);
      }
      if (op == "**") {
        if (ints && y >= 0) {
          int64_t acc = 1, base = x, e = y;
          while (e > 0) {
            if ((e & 1) && __builtin_mul_overflow(acc, base, &acc))
              return Err(pos, "integer overflow");
            e >>= 1;
            if (e > 0 && __builtin_mul_overflow(base, base, &base))
              return Err(pos, "integer overflow");
          }
          return Int(acc);
        }
        if (fx == 0 && fy < 0)
          return Err(pos, "ZeroDivisionError: 0.0 cannot be raised to a negative power");
        return Float(std::pow(fx, fy));
      }
      return unsupported();
    }
    if (op == "+") {
      if (a.kind == Value::kString && b.kind == Value::kString) return MakeStr(*a.s + *b.s, pos);
      if (a.kind == Value::kList && b.kind == Value::kList && a.tuple == b.tuple) {
        List l = *a.list;
        l.insert(l.end(), b.list->begin(), b.list->end());
        return MakeListAt(std::move(l), pos, a.tuple);
      }
      if (a.kind == Value::kString || a.kind == Value::kList) {
        return TypeErr(pos, absl::StrCat("can only concatenate ", TypeName(a), " (not \"",
                                         TypeName(b), "\") to ", TypeName(a)));
      }
      return unsupported();
    }
    if (op == "*") {
      const Value& seq = IsInt(&b) ? a : b;
      const Value& times = IsInt(&b) ? b : a;
      if (IsInt(&times) && (seq.kind == Value::kString || seq.kind == Value::kList)) {
        const int64_t n = std::max<int64_t>(0, times.integer());
        const size_t unit = seq.kind == Value::kString ? seq.s->size() : seq.list->size();
        if (unit > 0 && static_cast<double>(unit) * static_cast<double>(n) >
                            static_cast<double>(ChatTemplate::kMaxOutputBytes)) {
          return Err(pos, "repetition result is too large");
        }
        if (seq.kind == Value::kString) {
          std::string out;
          for (int64_t k = 0; k < n && unit > 0; ++k) out += *seq.s;
          return MakeStr(std::move(out), pos);
        }
        List l;
        for (int64_t k = 0; k < n && unit > 0; ++k)
          l.insert(l.end(), seq.list->begin(), seq.list->end());
        return MakeListAt(std::move(l), pos);
      }
      if (a.kind == Value::kString || a.kind == Value::kList) {
        return TypeErr(
            pos, absl::StrCat("can't multiply sequence by non-int of type '", TypeName(b), "'"));
      }
    }
    if (op == "%" && a.kind == Value::kString)
      return Err(pos, "printf-style '%' string formatting is not supported");
    return unsupported();
  }

  // Python's three-way ordering for < <= > >=: numbers, strings, lists.
  StatusOr<int> Order(const Value& a, const Value& b, const std::string& op, int pos) {
    if (a.kind == Value::kUndefined) return UndefinedErr(a, pos);
    if (b.kind == Value::kUndefined) return UndefinedErr(b, pos);
    if (a.numeric() && b.numeric()) {
      if (a.kind != Value::kFloat && b.kind != Value::kFloat)
        return a.integer() < b.integer() ? -1 : a.integer() > b.integer();
      return a.num() < b.num() ? -1 : a.num() > b.num();
    }
    if (a.kind == Value::kString && b.kind == Value::kString) {
      const int c = a.s->compare(*b.s);
      return c < 0 ? -1 : c > 0;
    }
    if (a.kind == Value::kList && b.kind == Value::kList && a.tuple == b.tuple) {
      const size_t n = std::min(a.list->size(), b.list->size());
      for (size_t k = 0; k < n; ++k) {
        const bool same = Equal((*a.list)[k], (*b.list)[k], &steps_);
        RETURN_IF_ERROR(Charge(0, pos));
        if (!same) return Order((*a.list)[k], (*b.list)[k], op, pos);
      }
      return a.list->size() < b.list->size() ? -1 : a.list->size() > b.list->size();
    }
    return TypeErr(pos, absl::StrCat("'", op, "' not supported between instances of '", TypeName(a),
                                     "' and '", TypeName(b), "'"));
  }

  StatusOr<bool> Contains(const Value& container, const Value& item, int pos) {
    switch (container.kind) {
      case Value::kUndefined:
        return false;
      case Value::kString:
        if (item.kind != Value::kString) {
          return TypeErr(pos, absl::StrCat("'in <string>' requires string as left operand, not ",
                                           TypeName(item)));
        }
        return container.s->find(*item.s) != std::string::npos;
      case Value::kList:
        RETURN_IF_ERROR(Charge(container.list->size() / 4, pos));
        for (const Value& x : *container.list) {
          if (Equal(x, item, &steps_)) return true;
        }
        RETURN_IF_ERROR(Charge(0, pos));
        return false;
      case Value::kDict:
        RETURN_IF_ERROR(Charge(container.dict->items.size() / 8, pos));
        return item.kind == Value::kString && container.dict->Find(*item.s) != nullptr;
      default:
        return TypeErr(
            pos, absl::StrCat("argument of type '", TypeName(container), "' is not iterable"));
    }
  }

  StatusOr<bool> Compare(const std::string& op, const Value& a, const Value& b, int pos) {
    if (op == "==" || op == "!=") {
      const bool same = Equal(a, b, &steps_);
      RETURN_IF_ERROR(Charge(0, pos));
      return same == (op == "==");
    }
    if (op == "in") return Contains(b, a, pos);
    if (op == "not in") {
      ASSIGN_OR_RETURN(bool r, Contains(b, a, pos));
      return !r;
    }
    ASSIGN_OR_RETURN(int c, Order(a, b, op, pos));
    if (op == "<") return c < 0;
    if (op == "<=") return c <= 0;
    if (op == ">") return c > 0;
    return c >= 0;
  }

  StatusOr<bool> Test(const std::string& name, const Value& v, const Args& a, int pos) {
    const Value* arg = a.Get(0, "other");
    auto need_arg = [&]() {
      return TypeErr(pos, absl::StrCat("test '", name, "' needs an argument"));
    };
    if (name == "defined") return v.kind != Value::kUndefined;
    if (name == "undefined") return v.kind == Value::kUndefined;
    if (name == "none") return v.kind == Value::kNone;
    if (name == "boolean") return v.kind == Value::kBool;
    if (name == "true") return v.kind == Value::kBool && v.b;
    if (name == "false") return v.kind == Value::kBool && !v.b;
    if (name == "integer") return v.kind == Value::kInt;
    if (name == "float") return v.kind == Value::kFloat;
    if (name == "number") return v.numeric();
    if (name == "string") return v.kind == Value::kString;
    if (name == "mapping") return v.kind == Value::kDict;
    if (name == "sequence") {
      return v.kind == Value::kString || v.kind == Value::kList || v.kind == Value::kDict ||
             v.kind == Value::kUndefined;
    }
    if (name == "iterable") {
      return v.kind == Value::kString || v.kind == Value::kList || v.kind == Value::kDict ||
             v.kind == Value::kUndefined || v.kind == Value::kLoop;
    }
    if (name == "callable") return v.kind == Value::kCallable || v.kind == Value::kUndefined;
    if (name == "odd" || name == "even" || name == "divisibleby") {
      Value divisor = Int(2);
      if (name == "divisibleby") {
        if (!arg) return need_arg();
        divisor = *arg;
      }
      ASSIGN_OR_RETURN(Value m, BinaryOp("%", v, divisor, pos));
      const bool zero = !Truthy(m);
      return name == "odd" ? !zero : zero;
    }
    if (name == "lower" || name == "upper") {
      if (v.kind != Value::kString) return false;
      ASSIGN_OR_RETURN(Value r,
                       CallMethod(v, name == "lower" ? "islower" : "isupper", Args{}, pos));
      return r.b;
    }
    if (!arg) return need_arg();
    if (name == "eq" || name == "equalto" || name == "==" || name == "ne" || name == "!=") {
      const bool same = Equal(v, *arg, &steps_);
      RETURN_IF_ERROR(Charge(0, pos));
      return same == (name[0] == 'e' || name[0] == '=');
    }
    if (name == "in") return Contains(*arg, v, pos);
    if (name == "sameas") {
      if (v.kind != arg->kind) return false;
      if (v.kind == Value::kList) return v.list == arg->list;
      if (v.kind == Value::kDict) return v.dict == arg->dict;
      const bool same = Equal(v, *arg, &steps_);
      RETURN_IF_ERROR(Charge(0, pos));
      return same;
    }
    std::string op = name;
    if (name == "lt" || name == "lessthan") op = "<";
    if (name == "le") op = "<=";
    if (name == "gt" || name == "greaterthan") op = ">";
    if (name == "ge") op = ">=";
    if (op == "<" || op == "<=" || op == ">" || op == ">=") return Compare(op, v, *arg, pos);
    return Err(pos, absl::StrCat("test '", name, "' is not supported"));
  }

  // jinja2's make_attrgetter: "a.b.0" looks up item a, then b, then 0.
  StatusOr<Value> AttrPath(const Value& item, const Value& attr, int pos) {
    if (attr.kind != Value::kString) return GetItem(item, attr, pos);
    Value cur = item;
    static const std::string kDot = ".";
    for (const std::string& part : Split(*attr.s, &kDot, -1)) {
      Value key = Str(part);
      if (!part.empty() && std::all_of(part.begin(), part.end(), IsDigit))
        key = Int(std::atoll(part.c_str()));
      ASSIGN_OR_RETURN(cur, GetItem(cur, key, pos));
    }
    return cur;
  }

  StatusOr<Value> Filter(const std::string& name, const Value& v, const Args& a, int pos) {
    // Markup(value): a string, as far as chat templates can tell.
    if (name == "safe") return MakeStr(ToStr(v), pos);
    if (name == "string") return MakeStr(ToStr(v), pos);
    if (name == "upper") return Str(MapCase(ToStr(v), Upper));
    if (name == "lower") return Str(MapCase(ToStr(v), Lower));
    if (name == "capitalize") return Str(PyCapitalize(ToStr(v)));
    if (name == "title") return Str(JinjaTitle(ToStr(v)));
    if (name == "trim") {
      const Value* chars = a.Get(0, "chars");
      return Str(Strip(ToStr(v), IsStr(chars) ? chars->s.get() : nullptr, true, true));
    }
    if (name == "length" || name == "count") {
      switch (v.kind) {
        case Value::kUndefined:
          return Int(0);
        case Value::kString:
          return Int(static_cast<int64_t>(Cps(*v.s).size()));
        case Value::kList:
          return Int(static_cast<int64_t>(v.list->size()));
        case Value::kDict:
          return Int(static_cast<int64_t>(v.dict->items.size()));
        case Value::kLoop:
          return Int(static_cast<int64_t>(static_cast<LoopState*>(v.obj)->items->size()));
        default:
          return TypeErr(pos, absl::StrCat("object of type '", TypeName(v), "' has no len()"));
      }
    }
    if (name == "default" || name == "d") {
      const Value* dflt = a.Get(0, "default_value");
      const Value* boolean = a.Get(1, "boolean");
      if (v.kind == Value::kUndefined || (boolean && Truthy(*boolean) && !Truthy(v)))
        return dflt ? *dflt : Str("");
      return v;
    }
    if (name == "first" || name == "last") {
      ASSIGN_OR_RETURN(auto l, Iterate(v, pos));
      if (l->empty()) return Undefined(absl::StrCat("No ", name, " item, sequence was empty."));
      return name == "first" ? l->front() : l->back();
    }
    if (name == "list") {
      ASSIGN_OR_RETURN(auto l, Iterate(v, pos));
      return MakeList(*l);
    }
    if (name == "reverse") {
      if (v.kind == Value::kString) {
        std::vector<uint32_t> cps = Cps(*v.s);
        std::reverse(cps.begin(), cps.end());
        return Str(FromCps(cps.data(), cps.data() + cps.size()));
      }
      ASSIGN_OR_RETURN(auto l, Iterate(v, pos));
      return MakeList(List(l->rbegin(), l->rend()));
    }
    if (name == "unique") {
      const Value* cs = a.Get(0, "case_sensitive");
      const Value* attr = a.Get(1, "attribute");
      ASSIGN_OR_RETURN(auto l, Iterate(v, pos));
      RETURN_IF_ERROR(Charge(l->size() * l->size() / 16, pos));
      List out, keys;
      for (const Value& x : *l) {
        Value key = x;
        if (attr) {
          ASSIGN_OR_RETURN(key, AttrPath(x, *attr, pos));
        }
        if (key.kind == Value::kString && !(cs && Truthy(*cs))) key = Str(MapCase(*key.s, Lower));
        if (std::none_of(keys.begin(), keys.end(),
                         [&](const Value& k) { return Equal(k, key, &steps_); })) {
          keys.push_back(key);
          out.push_back(x);
        }
        RETURN_IF_ERROR(Charge(0, pos));
      }
      return MakeList(std::move(out));
    }
    if (name == "items") {
      if (v.kind == Value::kUndefined) return MakeList({});
      if (v.kind != Value::kDict) return TypeErr(pos, "Can only get item pairs from a mapping.");
      return CallMethod(v, "items", Args{}, pos);
    }
    if (name == "join") {
      const Value* sep = a.Get(0, "d");
      const Value* attr = a.Get(1, "attribute");
      ASSIGN_OR_RETURN(auto l, Iterate(v, pos));
      std::string out;
      for (size_t k = 0; k < l->size(); ++k) {
        Value x = (*l)[k];
        if (attr) {
          ASSIGN_OR_RETURN(x, AttrPath(x, *attr, pos));
        }
        absl::StrAppend(&out, k && sep ? ToStr(*sep) : "", ToStr(x));
        if (out.size() > ChatTemplate::kMaxOutputBytes) break;
      }
      return MakeStr(std::move(out), pos);
    }
    if (name == "map") {
      ASSIGN_OR_RETURN(auto l, Iterate(v, pos));
      List out;
      const Value* attr = nullptr;
      const Value* dflt = nullptr;
      for (const auto& [k, x] : a.kw) {
        if (k == "attribute") attr = &x;
        if (k == "default") dflt = &x;
      }
      if (!attr && (a.pos.empty() || !IsStr(&a.pos[0])))
        return TypeErr(pos, "map() needs attribute= or a filter name");
      Args rest;
      if (!attr) rest.pos.assign(a.pos.begin() + 1, a.pos.end());
      for (const Value& x : *l) {
        if (attr) {
          ASSIGN_OR_RETURN(Value y, AttrPath(x, *attr, pos));
          out.push_back(y.kind == Value::kUndefined && dflt ? *dflt : y);
        } else {
          if (!KnownFilter(*a.pos[0].s))
            return Err(pos, absl::StrCat("filter '", *a.pos[0].s, "' is not supported"));
          ASSIGN_OR_RETURN(Value y, Filter(*a.pos[0].s, x, rest, pos));
          out.push_back(std::move(y));
        }
      }
      return MakeList(std::move(out));
    }
    if (name == "select" || name == "reject" || name == "selectattr" || name == "rejectattr") {
      const bool by_attr = name.size() > 6;
      const bool keep_if = name[0] == 's';
      if (by_attr && a.pos.empty())
        return TypeErr(pos, absl::StrCat(name, "() needs an attribute name"));
      const size_t t = by_attr ? 1 : 0;
      if (a.pos.size() > t && !IsStr(&a.pos[t]))
        return TypeErr(pos, absl::StrCat(name, "() test name must be a string"));
      const std::string test = a.pos.size() > t ? *a.pos[t].s : "";
      if (!test.empty() && !KnownTest(test))
        return Err(pos, absl::StrCat("test '", test, "' is not supported"));
      Args rest;
      if (a.pos.size() > t + 1) rest.pos.assign(a.pos.begin() + t + 1, a.pos.end());
      ASSIGN_OR_RETURN(auto l, Iterate(v, pos));
      List out;
      for (const Value& x : *l) {
        Value y = x;
        if (by_attr) {
          ASSIGN_OR_RETURN(y, AttrPath(x, a.pos[0], pos));
        }
        bool r = Truthy(y);
        if (!test.empty()) {
          ASSIGN_OR_RETURN(r, Test(test, y, rest, pos));
        }
        if (r == keep_if) out.push_back(x);
      }
      return MakeList(std::move(out));
    }
    if (name == "tojson") {
      JsonStyle st;
      const Value* ensure_ascii = a.Get(0, "ensure_ascii");
      const Value* indent = a.Get(1, "indent");
      const Value* seps = a.Get(2, "separators");
      const Value* sort_keys = a.Get(3, "sort_keys");
      st.ensure_ascii = ensure_ascii && Truthy(*ensure_ascii);
      st.sort_keys = sort_keys && Truthy(*sort_keys);
      if (Given(indent)) {
        st.indented = true;
        st.item_sep = ",";
        if (indent->kind == Value::kString) {
          st.indent = *indent->s;
        } else if (IsInt(indent)) {
          st.indent = std::string(std::clamp<int64_t>(indent->integer(), 0, 64), ' ');
        } else {
          return TypeErr(pos, "tojson indent must be an int or a string");
        }
      }
      if (Given(seps)) {
        if (seps->kind != Value::kList || seps->list->size() != 2 || !IsStr(&(*seps->list)[0]) ||
            !IsStr(&(*seps->list)[1])) {
          return TypeErr(pos, "tojson separators must be a pair of strings");
        }
        st.item_sep = *(*seps->list)[0].s;
        st.key_sep = *(*seps->list)[1].s;
      }
      std::string out;
      const Value* bad = nullptr;
      if (!ToJson(v, st, 0, out, &bad)) {
        if (!bad) {
          return Err(
              pos, absl::StrCat("tojson output exceeds ", ChatTemplate::kMaxOutputBytes, " bytes"));
        }
        return TypeErr(
            pos, absl::StrCat("Object of type ", TypeName(*bad), " is not JSON serializable"));
      }
      return MakeStr(std::move(out), pos);
    }
    if (name == "int" || name == "float") {
      const Value* dflt = a.Get(0, "default");
      const Value fallback = dflt ? *dflt : name == "int" ? Int(0) : Float(0);
      if (v.kind == Value::kUndefined) return UndefinedErr(v, pos);
      double f = 0;
      if (v.numeric()) {
        if (name == "int" && v.kind != Value::kFloat) return Int(v.integer());
        f = v.num();
      } else if (v.kind == Value::kString) {
        std::string t = Strip(*v.s, nullptr, true, true);
        t.erase(std::remove(t.begin(), t.end(), '_'), t.end());
        int64_t i = 0;
        const char* b = t.data() + (!t.empty() && t[0] == '+');
        const auto r = std::from_chars(b, t.data() + t.size(), i);
        if (name == "int" && !t.empty() && r.ec == std::errc() && r.ptr == t.data() + t.size())
          return Int(i);
        const bool plain =
            !t.empty() && t.find_first_not_of("0123456789.eE+-") == std::string::npos;
        const std::string low = MapCase(t, Lower);
        const bool special = low == "inf" || low == "-inf" || low == "+inf" || low == "nan" ||
                             low == "infinity" || low == "-infinity" || low == "+infinity";
        char* end = nullptr;
        f = std::strtod(t.c_str(), &end);
        if (!(plain || special) || end != t.c_str() + t.size()) return fallback;
      } else {
        return fallback;
      }
      if (name == "float") return Float(f);
      if (std::isnan(f) || std::isinf(f) || std::fabs(f) >= 9.2e18) return fallback;
      return Int(static_cast<int64_t>(f));
    }
    if (name == "abs") {
      if (v.kind == Value::kFloat) return Float(std::fabs(v.f));
      if (v.numeric()) {
        if (v.integer() == INT64_MIN) return Err(pos, "integer overflow");
        return Int(std::abs(v.integer()));
      }
      if (v.kind == Value::kUndefined) return UndefinedErr(v, pos);
      return TypeErr(pos, absl::StrCat("bad operand type for abs(): '", TypeName(v), "'"));
    }
    if (name == "replace") {
      const Value* old = a.Get(0, "old");
      const Value* with = a.Get(1, "new");
      const Value* count = a.Get(2, "count");
      if (!old || !with) return TypeErr(pos, "replace() needs old and new");
      return MakeStr(
          Replace(ToStr(v), ToStr(*old), ToStr(*with), IsInt(count) ? count->integer() : -1), pos);
    }
    if (name == "escape" || name == "e") {
      std::string out;
      for (char c : ToStr(v)) {
        switch (c) {
          case '&':
            out += "&amp;";
            break;
          case '<':
            out += "&lt;";
            break;
          case '>':
            out += "&gt;";
            break;
          case '"':
            out += "&#34;";
            break;
          case '\'':
            out += "&#39;";
            break;
          default:
            out += c;
        }
      }
      return MakeStr(std::move(out), pos);
    }
    if (name == "indent") {
      if (v.kind == Value::kUndefined) return UndefinedErr(v, pos);
      if (v.kind != Value::kString) {
        return TypeErr(pos, absl::StrCat("indent needs a string, not '", TypeName(v), "'"));
      }
      const Value* width = a.Get(0, "width");
      const Value* first = a.Get(1, "first");
      const Value* blank = a.Get(2, "blank");
      std::string ind(4, ' ');
      if (IsStr(width)) ind = *width->s;
      if (IsInt(width)) ind = std::string(std::clamp<int64_t>(width->integer(), 0, 256), ' ');
      const std::vector<std::string> lines = SplitLines(ToStr(v) + "\n");
      std::string out;
      for (size_t k = 0; k < lines.size(); ++k) {
        if (k) out += '\n';
        if (k && (!lines[k].empty() || (blank && Truthy(*blank)))) out += ind;
        out += lines[k];
        if (out.size() > ChatTemplate::kMaxOutputBytes) break;
      }
      if (first && Truthy(*first)) out = ind + out;
      return MakeStr(std::move(out), pos);
    }
    return Err(pos, absl::StrCat("filter '", name, "' is not supported"));
  }

  const Program& p_;
  // The render's arena: what Values point at lives until the render ends.
  std::deque<Scope> scopes_;
  std::deque<Namespace> namespaces_;
  std::deque<LoopState> loops_;
  std::deque<Callable> callables_;
  long steps_ = 0;
  long iterations_ = 0;
  int depth_ = 0;  // macro calls in progress
  Control control_ = kNone;
};

}  // namespace chat_template_internal

using chat_template_internal::Body;
using chat_template_internal::Renderer;
using chat_template_internal::Scope;
using chat_template_internal::Value;

absl::StatusOr<ChatTemplate> ChatTemplate::Parse(std::string source) {
  if (source.size() > kMaxSourceBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "chat_template is ", source.size(), " bytes; at most ", kMaxSourceBytes, " are accepted"));
  }
  auto p = std::make_shared<Program>();
  // jinja2 lexes with newlines normalized to \n and drops one trailing newline
  // (keep_trailing_newline=False).
  p->source.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      p->source += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      p->source += source[i];
    }
  }
  if (!p->source.empty() && p->source.back() == '\n') p->source.pop_back();
  p->line_starts.push_back(0);
  for (size_t i = 0; i < p->source.size(); ++i) {
    if (p->source[i] == '\n') p->line_starts.push_back(i + 1);
  }
  ASSIGN_OR_RETURN(auto tokens, chat_template_internal::Lexer(*p).Run());
  ASSIGN_OR_RETURN(p->body, chat_template_internal::Parser(*p, std::move(tokens)).Run());
  return ChatTemplate(std::move(p));
}

absl::StatusOr<std::string> ChatTemplate::Render(
    const std::vector<ChatMessage>& messages, bool add_generation_prompt,
    const std::string& bos_token, const std::string& eos_token,
    const std::vector<std::pair<std::string, std::string>>& extra) const {
  using namespace chat_template_internal;
  Renderer r(*program_);
  Scope* root = r.NewScope(nullptr);
  for (const char* g : {"raise_exception", "range", "namespace", "dict", "strftime_now"})
    root->Set(g, r.Global(g));
  List msgs;
  for (const ChatMessage& m : messages) {
    Dict d;
    d.Set("role", Str(m.role));
    d.Set("content", Str(m.content));
    msgs.push_back(MakeDict(std::move(d)));
  }
  root->Set("messages", MakeList(std::move(msgs)));
  root->Set("add_generation_prompt", Bool(add_generation_prompt));
  root->Set("bos_token", Str(bos_token));
  root->Set("eos_token", Str(eos_token));
  root->Set("tools", None());
  root->Set("documents", None());
  for (const auto& [k, v] : extra) root->Set(k, Str(v));
  std::string out;
  RETURN_IF_ERROR(r.Exec(program_->body, root, out));
  return out;
}

}  // namespace saturn
