// The chat-template lexer: template text into tokens (text, {{ }}/{% %} delimiters, names,
// string and number literals, operators), applying trim_blocks, lstrip_blocks and the -/+
// whitespace markers as jinja2's lexer does. Errors name the line and column.
#include <charconv>
#include <cstdlib>

#include "engine/tokenizer/chat_template_internal.h"
#include "kernels/base/status_macros.h"

namespace saturn {
namespace chat_template_internal {

// ---------------------------------------------------------------------------------------------
// Lexer: template text into tokens, applying whitespace control as jinja2's lexer does.

bool IsDigit(char c) { return c >= '0' && c <= '9'; }

namespace {

bool IsNameStart(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
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

}  // namespace

StatusOr<std::vector<Token>> Lex(const Program& p) { return Lexer(p).Run(); }

}  // namespace chat_template_internal
}  // namespace saturn
