// The chat-template evaluator: runs the parsed statements (if, for, set, macro, break/continue)
// and evaluates expressions (names, attributes, items, slices, calls, operators, comparisons)
// over Values, with the render's arena of scopes, namespaces, loops and callables, and the
// globals (range, namespace, dict, raise_exception, strftime_now). Every loop, recursion and
// value it builds is bounded. Also ChatTemplate::Render. Methods, tests and filters are in
// chat_template_filters.cc.
#include <cmath>
#include <ctime>

#include "engine/tokenizer/chat_template_internal.h"
#include "kernels/base/status_macros.h"

namespace saturn {
namespace chat_template_internal {

// ---------------------------------------------------------------------------------------------
// Evaluator.

namespace {

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

}  // namespace

absl::Status Renderer::Exec(const Body& body, Scope* scope, std::string& out) {
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

// What `for x in v` walks: a list's items, a dict's keys, a string's characters.
StatusOr<std::shared_ptr<const List>> Renderer::Iterate(const Value& v, int pos) {
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

absl::Status Renderer::Bind(const std::vector<std::string>& names, const Value& item, Scope* s,
                            int pos) {
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

absl::Status Renderer::For(const Node& n, Scope* scope, std::string& out) {
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

absl::Status Renderer::Tick(int pos) {
  if (++iterations_ > ChatTemplate::kMaxLoopIterations) {
    return Err(
        pos, absl::StrCat("loops ran more than ", ChatTemplate::kMaxLoopIterations, " iterations"));
  }
  return Charge(1, pos);
}

absl::Status Renderer::Set(const Node& n, Scope* scope) {
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

StatusOr<Value> Renderer::Eval(const Expr& e, Scope* scope) {
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

absl::Status Renderer::EvalArgs(const Expr& e, Scope* scope, Args& args) {
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
StatusOr<Value> Renderer::GetAttr(const Value& obj, const std::string& name, int pos) {
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

Value Renderer::BoundMethod(const Value& obj, const std::string& name) {
  callables_.emplace_back();
  Callable& c = callables_.back();
  c.kind = Callable::kMethod;
  c.name = name;
  c.self = obj;
  return CallableValue(&c);
}

// jinja2's environment.getitem: the item, else the attribute of that name, else undefined.
StatusOr<Value> Renderer::GetItem(const Value& obj, const Value& key, int pos) {
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
StatusOr<Value> Renderer::Slice(const Value& obj, const Value* b, int pos) {
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
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) l.push_back((*obj.list)[i]);
    return MakeList(std::move(l), obj.tuple);
  }
  std::string s;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) AppendCp(s, cps[i]);
  return Str(std::move(s));
}

StatusOr<Value> Renderer::Call(const Value& f, const Args& args, int pos) {
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

StatusOr<Value> Renderer::CallMacro(const Callable& c, const Args& args, int pos) {
  const Node& m = *c.macro;
  if (args.pos.size() > m.names.size()) {
    return TypeErr(pos, absl::StrCat("macro '", m.text, "' takes not more than ", m.names.size(),
                                     " argument(s)"));
  }
  for (const auto& [k, v] : args.kw) {
    if (std::find(m.names.begin(), m.names.end(), k) == m.names.end()) {
      return TypeErr(pos, absl::StrCat("macro '", m.text, "' takes no keyword argument '", k, "'"));
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
      s->Set(m.names[k], Undefined(absl::StrCat("parameter '", m.names[k], "' was not provided")));
    }
  }
  std::string out;
  ++depth_;
  absl::Status st = Exec(m.bodies[0], s, out);
  --depth_;
  RETURN_IF_ERROR(st);
  return Str(std::move(out));
}

StatusOr<Value> Renderer::CallGlobal(const std::string& name, const Args& args, int pos) {
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

// Python's + - * / // % ** and jinja2's ~.
StatusOr<Value> Renderer::BinaryOp(const std::string& op, const Value& a, const Value& b, int pos) {
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
StatusOr<int> Renderer::Order(const Value& a, const Value& b, const std::string& op, int pos) {
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

StatusOr<bool> Renderer::Contains(const Value& container, const Value& item, int pos) {
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
      return TypeErr(pos,
                     absl::StrCat("argument of type '", TypeName(container), "' is not iterable"));
  }
}

StatusOr<bool> Renderer::Compare(const std::string& op, const Value& a, const Value& b, int pos) {
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

}  // namespace chat_template_internal

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
