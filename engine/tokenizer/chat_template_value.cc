// Values for the chat-template renderer: constructing the Python objects a template sees, and
// Python's truthiness, ==, str() and repr() on them, plus transformers' tojson. Walks over nested
// lists and dicts are bounded by kMaxValueDepth (and == by the work counter), and repr and tojson
// stop at the output bound.
#include <algorithm>
#include <cmath>

#include "engine/tokenizer/chat_template_internal.h"

namespace saturn {
namespace chat_template_internal {

// ---------------------------------------------------------------------------------------------
// Values: the Python objects a template sees.

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
Value MakeList(List l, bool tuple) {
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

namespace {

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

}  // namespace

std::string Repr(const Value& v) {
  std::string out;
  ReprTo(v, out);
  return out;
}

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
}  // namespace chat_template_internal
}  // namespace saturn
