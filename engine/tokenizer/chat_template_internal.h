// Internal to the chat-template renderer: only chat_template_*.cc may include this header.
// The renderer is a lexer, a parser to a small AST and a tree-walking evaluator for the Jinja
// subset of chat templates, each matching Python jinja2 3.1 as Hugging Face configures it (see
// chat_template.h). Values mirror the Python objects jinja2 works on, so printing, comparing and
// stringifying follow Python's rules (repr of lists, float repr, str.strip's whitespace). Lists
// and dicts are immutable once built, as in jinja2's immutable sandbox, so they are shared, never
// copied; namespaces, loop objects and callables live in a per-render arena. None of these files
// may throw out of the API, recurse without a bound, or loop without a bound. This header declares
// what they share: the bounds on work, the string helpers (chat_template_text.cc), the Value model
// (chat_template_value.cc), the AST and parsed Program, the lexer's tokens (chat_template_lex.cc),
// the filter and test names (chat_template_parse.cc), and the Renderer, whose statements and
// expressions are in chat_template_render.cc and its methods, tests and filters in
// chat_template_filters.cc.
#pragma once

#include <algorithm>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "engine/tokenizer/chat_template.h"
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
// Text: UTF-8 code points and Python's string methods (chat_template_text.cc).

uint32_t NextCp(std::string_view s, size_t& i);
void AppendCp(std::string& out, uint32_t cp);
std::vector<uint32_t> Cps(std::string_view s);
std::string FromCps(const uint32_t* begin, const uint32_t* end);
bool IsSpace(uint32_t c);
bool AllSpace(std::string_view s);
std::string Strip(std::string_view s, const std::string* chars, bool left, bool right);
uint32_t Upper(uint32_t c);
uint32_t Lower(uint32_t c);
bool IsAlpha(uint32_t c);
std::string MapCase(std::string_view s, uint32_t (*f)(uint32_t));
std::string PyTitle(std::string_view s);
std::string PyCapitalize(std::string_view s);
std::string FloatRepr(double d);
std::string StrRepr(std::string_view s);
std::vector<std::string> Split(std::string_view s, const std::string* sep, int64_t maxsplit);
std::string Replace(std::string_view s, std::string_view old, std::string_view with, int64_t count);
std::vector<std::string> SplitLines(std::string_view s);
std::string JinjaTitle(std::string_view s);
std::string JsonString(std::string_view s, bool ensure_ascii);

// ---------------------------------------------------------------------------------------------
// Values: the Python objects a template sees (chat_template_value.cc).

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

Value Undefined(std::string hint);
Value None();
Value Bool(bool b);
Value Int(int64_t i);
Value Float(double f);
Value Str(std::string s);
Value MakeList(List l, bool tuple = false);
Value MakeDict(Dict d);
const char* TypeName(const Value& v);
bool Truthy(const Value& v);
std::string ToStr(const Value& v);
std::string Repr(const Value& v);
bool Equal(const Value& a, const Value& b, long* work);

// transformers' tojson: json.dumps(x, ensure_ascii, indent, separators, sort_keys).
struct JsonStyle {
  bool ensure_ascii = false;
  bool indented = false;
  std::string indent;
  std::string item_sep = ", ";
  std::string key_sep = ": ";
  bool sort_keys = false;
};
bool ToJson(const Value& v, const JsonStyle& st, int level, std::string& out, const Value** bad);

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
// Lexer tokens (chat_template_lex.cc).

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

// The template's tokens, with jinja2's whitespace control applied.
StatusOr<std::vector<Token>> Lex(const Program& p);
bool IsDigit(char c);  // ASCII 0-9, as the lexer and attribute paths ("a.0") read digits

// ---------------------------------------------------------------------------------------------
// The filter and test names the parser accepts (chat_template_parse.cc).

bool Known(std::string_view name, const std::string_view* begin, const std::string_view* end);
bool KnownFilter(std::string_view n);
bool KnownTest(std::string_view n);

// ---------------------------------------------------------------------------------------------
// Evaluator: chat_template_render.cc, and chat_template_filters.cc for the methods, tests and
// filters.

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

inline bool IsInt(const Value* v) {
  return v && (v->kind == Value::kInt || v->kind == Value::kBool);
}
inline bool IsStr(const Value* v) { return v && v->kind == Value::kString; }

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

  absl::Status Exec(const Body& body, Scope* scope, std::string& out);

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
    // A step per 4 bytes: the strings one render makes stay under about 80 MB together (at a
    // step per 64 bytes, 4 MB strings appended in a loop reached 1.5 GB before the bound).
    RETURN_IF_ERROR(Charge(s.size() / 4, pos));
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

  // Statements and expressions (chat_template_render.cc).
  StatusOr<std::shared_ptr<const List>> Iterate(const Value& v, int pos);
  absl::Status Bind(const std::vector<std::string>& names, const Value& item, Scope* s, int pos);
  absl::Status For(const Node& n, Scope* scope, std::string& out);
  absl::Status Tick(int pos);
  absl::Status Set(const Node& n, Scope* scope);
  StatusOr<Value> Eval(const Expr& e, Scope* scope);
  absl::Status EvalArgs(const Expr& e, Scope* scope, Args& args);
  StatusOr<Value> GetAttr(const Value& obj, const std::string& name, int pos);
  Value BoundMethod(const Value& obj, const std::string& name);
  StatusOr<Value> GetItem(const Value& obj, const Value& key, int pos);
  StatusOr<Value> Slice(const Value& obj, const Value* b, int pos);
  StatusOr<Value> Call(const Value& f, const Args& args, int pos);
  StatusOr<Value> CallMacro(const Callable& c, const Args& args, int pos);
  StatusOr<Value> CallGlobal(const std::string& name, const Args& args, int pos);
  StatusOr<Value> BinaryOp(const std::string& op, const Value& a, const Value& b, int pos);
  StatusOr<int> Order(const Value& a, const Value& b, const std::string& op, int pos);
  StatusOr<bool> Contains(const Value& container, const Value& item, int pos);
  StatusOr<bool> Compare(const std::string& op, const Value& a, const Value& b, int pos);

  // Methods, tests and filters (chat_template_filters.cc).
  StatusOr<Value> CallMethod(const Value& self, const std::string& name, const Args& a, int pos);
  StatusOr<bool> Test(const std::string& name, const Value& v, const Args& a, int pos);
  StatusOr<Value> AttrPath(const Value& item, const Value& attr, int pos);
  StatusOr<Value> Filter(const std::string& name, const Value& v, const Args& a, int pos);

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
}  // namespace saturn
