// The chat-template parser: tokens into the AST of statements and expressions, with jinja2's
// grammar and operator precedence, refusing (with line and column) any construct, filter or test
// outside the supported subset. Also ChatTemplate::Parse, which normalizes newlines as jinja2 does.
#include "engine/tokenizer/chat_template_internal.h"
#include "kernels/base/status_macros.h"

namespace saturn {
namespace chat_template_internal {

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

namespace {

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

}  // namespace

}  // namespace chat_template_internal

using chat_template_internal::Program;

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
  ASSIGN_OR_RETURN(auto tokens, chat_template_internal::Lex(*p));
  ASSIGN_OR_RETURN(p->body, chat_template_internal::Parser(*p, std::move(tokens)).Run());
  return ChatTemplate(std::move(p));
}

}  // namespace saturn
