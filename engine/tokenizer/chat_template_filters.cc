// The chat-template evaluator's methods, tests and filters: Python's str, dict and list methods
// and loop.cycle, jinja2's tests (defined, none, divisibleby, in, ...) and its filters
// (default, join, map, select, tojson, ...), each matching Python jinja2 3.1 and refusing
// anything else with the line and column.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>

#include "engine/tokenizer/chat_template_internal.h"
#include "kernels/base/status_macros.h"

namespace saturn {
namespace chat_template_internal {

namespace {

bool Given(const Value* v) { return v && v->kind != Value::kNone && v->kind != Value::kUndefined; }

}  // namespace

StatusOr<Value> Renderer::CallMethod(const Value& self, const std::string& name, const Args& a,
                                     int pos) {
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
      return TypeErr(
          pos, absl::StrCat(name, " first arg must be str or a tuple of str, not ", TypeName(*p)));
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
      return Int(at == std::string::npos ? -1 : static_cast<int64_t>(Cps(s.substr(0, at)).size()));
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

StatusOr<bool> Renderer::Test(const std::string& name, const Value& v, const Args& a, int pos) {
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
    ASSIGN_OR_RETURN(Value r, CallMethod(v, name == "lower" ? "islower" : "isupper", Args{}, pos));
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
StatusOr<Value> Renderer::AttrPath(const Value& item, const Value& attr, int pos) {
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

StatusOr<Value> Renderer::Filter(const std::string& name, const Value& v, const Args& a, int pos) {
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
        return Err(pos,
                   absl::StrCat("tojson output exceeds ", ChatTemplate::kMaxOutputBytes, " bytes"));
      }
      return TypeErr(pos,
                     absl::StrCat("Object of type ", TypeName(*bad), " is not JSON serializable"));
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
      const bool plain = !t.empty() && t.find_first_not_of("0123456789.eE+-") == std::string::npos;
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

}  // namespace chat_template_internal
}  // namespace saturn
