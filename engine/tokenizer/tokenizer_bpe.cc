// Byte-level BPE (see tokenizer_bpe.h). The steps and their order follow transformers'
// `tokenizers` crate: AddedVocabulary split -> pre-tokenizer (Split / ByteLevel, in
// tokenizer.json's order) -> BPE per piece -> ids; decoding maps the byte-level characters
// back to bytes. Never throws (nlohmann and ICU errors become Status).
#include "engine/tokenizer/tokenizer_bpe.h"

#include <unicode/regex.h>
#include <unicode/unistr.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <queue>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/base/json_depth.h"
#include "kernels/base/read_file.h"
#include "kernels/base/status_macros.h"
#include "kernels/base/utf8.h"

namespace saturn {
namespace {

// GPT-2's pre-tokenizer regex (ByteLevel with use_regex: true).
constexpr char kGpt2Pattern[] =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// GPT-2's bytes_to_unicode: printable bytes map to themselves, the others to U+0100 onwards.
const std::vector<std::string>& ByteToChar() {
  static const std::vector<std::string> table = [] {
    std::vector<int> cp(256, -1);
    auto keep = [&](int lo, int hi) {
      for (int b = lo; b <= hi; ++b) cp[b] = b;
    };
    keep('!', '~');
    keep(0xA1, 0xAC);
    keep(0xAE, 0xFF);
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      if (cp[b] < 0) cp[b] = 256 + n++;
    }
    std::vector<std::string> out(256);
    for (int b = 0; b < 256; ++b) {
      icu::UnicodeString(static_cast<UChar32>(cp[b])).toUTF8String(out[b]);
    }
    return out;
  }();
  return table;
}

const std::unordered_map<std::string, unsigned char>& CharToByte() {
  static const std::unordered_map<std::string, unsigned char> table = [] {
    std::unordered_map<std::string, unsigned char> m;
    for (int b = 0; b < 256; ++b) m[ByteToChar()[b]] = static_cast<unsigned char>(b);
    return m;
  }();
  return table;
}

// The UTF-8 characters of s (s is valid UTF-8 made by ByteToChar or the vocabulary).
std::vector<std::string> Chars(const std::string& s) {
  std::vector<std::string> out;
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = s[i];
    const size_t n = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    out.push_back(s.substr(i, n));
    i += n;
  }
  return out;
}

// \s and \S as Oniguruma (the tokenizers crate) reads them: the White_Space property (ICU's
// own \s leaves out U+000B and U+0085).
std::string OnigWhitespace(const std::string& pattern) {
  std::string out;
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] == '\\' && i + 1 < pattern.size()) {
      const char n = pattern[i + 1];
      out += n == 's' ? "\\p{White_Space}" : n == 'S' ? "\\P{White_Space}" : std::string{'\\', n};
      ++i;
    } else {
      out += pattern[i];
    }
  }
  return out;
}

absl::Status Unsupported(const std::string& name, const std::string& what) {
  return absl::UnimplementedError(absl::StrCat(name, ": ", what,
                                               " is not implemented (Saturn reads byte-level BPE "
                                               "tokenizers as GPT-2 and Llama 3 use them)"));
}

// A token id as tokenizer.json writes it: an integer in [0, 2^31 - 1).
absl::StatusOr<int> IdOf(const nlohmann::json& v, const std::string& name,
                         const std::string& what) {
  if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= INT32_MAX) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": ", what, " is ", v.dump(),
                                                   ", not a token id (an integer in [0, ",
                                                   INT32_MAX, "))"));
  }
  return static_cast<int>(v.get<int64_t>());
}

}  // namespace

struct BpeTokenizer::PreStep {
  std::unique_ptr<icu::RegexPattern> split;  // null: no split
  bool byte_level = false;                   // maps bytes (must be the last step)
  bool add_prefix_space = false;

  static absl::StatusOr<std::unique_ptr<PreStep>> Regex(const std::string& pattern,
                                                        const std::string& name) {
    auto step = std::make_unique<PreStep>();
    UErrorCode status = U_ZERO_ERROR;
    UParseError parse;
    step->split.reset(icu::RegexPattern::compile(
        icu::UnicodeString::fromUTF8(OnigWhitespace(pattern)), 0, parse, status));
    if (U_FAILURE(status) || step->split == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(name, ": pre-tokenizer regex does not ",
                                                     "compile (", u_errorName(status),
                                                     "): ", pattern));
    }
    return step;
  }

  // Isolated split: every match and every gap between matches is a piece.
  void Split(const std::string& text, std::vector<std::string>* out) const {
    const icu::UnicodeString u = icu::UnicodeString::fromUTF8(text);
    UErrorCode status = U_ZERO_ERROR;
    std::unique_ptr<icu::RegexMatcher> m(split->matcher(u, status));
    int32_t last = 0;
    auto emit = [&](int32_t begin, int32_t end) {
      if (end <= begin) return;
      std::string piece;
      u.tempSubStringBetween(begin, end).toUTF8String(piece);
      out->push_back(std::move(piece));
    };
    while (U_SUCCESS(status) && m->find(status)) {
      const int32_t begin = m->start(status), end = m->end(status);
      emit(last, begin);
      emit(begin, end);
      last = end;
    }
    emit(last, u.length());
  }
};

BpeTokenizer::BpeTokenizer() = default;
BpeTokenizer::~BpeTokenizer() = default;

absl::StatusOr<std::unique_ptr<BpeTokenizer>> BpeTokenizer::Load(const std::string& path) {
  absl::StatusOr<std::string> text = ReadFileBounded(path, kMaxTokenizerFileBytes);
  if (!text.ok()) return text.status();
  return Parse(*text, path);
}

absl::StatusOr<std::unique_ptr<BpeTokenizer>> BpeTokenizer::Parse(const std::string& text,
                                                                  const std::string& name) {
  if (absl::Status s = CheckJsonDepth(text, kMaxFileJsonDepth, name); !s.ok()) return s;
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": not a JSON object"));
  }
  std::unique_ptr<BpeTokenizer> t(new BpeTokenizer());
  try {
    if (j.contains("normalizer") && !j["normalizer"].is_null()) {
      return Unsupported(name, absl::StrCat("normalizer ", j["normalizer"].dump()));
    }
    const nlohmann::json& model = j.at("model");
    if (model.value("type", "") != "BPE") {
      return Unsupported(name, absl::StrCat("model.type ", model.value("type", "<missing>")));
    }
    // GPT-2's own tokenizer.json writes "" for the prefix and suffix: the same as none.
    for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix", "dropout"}) {
      if (!model.contains(key) || model[key].is_null()) continue;
      if (!model[key].is_string() || !model[key].get<std::string>().empty()) {
        return Unsupported(name, absl::StrCat("model.", key, " ", model[key].dump()));
      }
    }
    if (model.value("byte_fallback", false)) return Unsupported(name, "model.byte_fallback");
    t->ignore_merges_ = model.value("ignore_merges", false);
    for (const auto& [token, value] : model.at("vocab").items()) {
      ASSIGN_OR_RETURN(const int id, IdOf(value, name, "model.vocab[\"" + token + "\"]"));
      t->vocab_[token] = id;
      t->id_to_token_[id] = token;
      t->vocab_size_ = std::max(t->vocab_size_, id + 1);
    }
    int rank = 0;
    for (const auto& m : model.at("merges")) {
      // "a b" (tokenizers < 0.20) or ["a", "b"].
      const std::string key =
          m.is_string() ? m.get<std::string>()
                        : absl::StrCat(m.at(0).get<std::string>(), " ", m.at(1).get<std::string>());
      t->merge_rank_.emplace(key, rank++);
    }
    for (const auto& a : j.value("added_tokens", nlohmann::json::array())) {
      for (const char* flag : {"lstrip", "rstrip", "single_word"}) {
        if (a.value(flag, false)) {
          return Unsupported(name,
                             absl::StrCat("added token ", a.at("content").dump(), " with ", flag));
        }
      }
      ASSIGN_OR_RETURN(const int id, IdOf(a.at("id"), name, "added_tokens id"));
      t->added_.push_back({a.at("content").get<std::string>(), id, a.value("special", false)});
      t->vocab_size_ = std::max(t->vocab_size_, id + 1);
    }
    for (const Added& a : t->added_) {
      if (!a.content.empty()) t->added_first_[static_cast<unsigned char>(a.content[0])] = true;
    }
    std::sort(t->added_.begin(), t->added_.end(),
              [](const Added& a, const Added& b) { return a.content.size() > b.content.size(); });

    // Pre-tokenizer: ByteLevel, or a Sequence of Split(Regex, Isolated) steps ending in one.
    const nlohmann::json& pre = j.at("pre_tokenizer");
    std::vector<nlohmann::json> steps;
    if (pre.value("type", "") == "Sequence") {
      for (const auto& s : pre.at("pretokenizers")) steps.push_back(s);
    } else {
      steps.push_back(pre);
    }
    for (size_t i = 0; i < steps.size(); ++i) {
      const nlohmann::json& s = steps[i];
      const std::string type = s.value("type", "<missing>");
      if (type == "Split") {
        if (s.value("behavior", "") != "Isolated" || s.value("invert", false) ||
            !s.at("pattern").contains("Regex")) {
          return Unsupported(name, absl::StrCat("pre_tokenizer Split ", s.dump()));
        }
        ASSIGN_OR_RETURN(auto step, PreStep::Regex(s["pattern"]["Regex"].get<std::string>(), name));
        t->pre_.push_back(std::move(step));
      } else if (type == "ByteLevel" && i + 1 == steps.size()) {
        std::unique_ptr<PreStep> step;
        if (s.value("use_regex", true)) {
          ASSIGN_OR_RETURN(step, PreStep::Regex(kGpt2Pattern, name));
        } else {
          step = std::make_unique<PreStep>();
        }
        step->byte_level = true;
        step->add_prefix_space = s.value("add_prefix_space", false);
        t->pre_.push_back(std::move(step));
      } else {
        return Unsupported(name, absl::StrCat("pre_tokenizer ", type,
                                              " (a byte-level tokenizer ends in ByteLevel)"));
      }
    }
    if (t->pre_.empty() || !t->pre_.back()->byte_level) {
      return Unsupported(name, "a pre_tokenizer without ByteLevel");
    }
    if (j.contains("decoder") && !j["decoder"].is_null() &&
        j["decoder"].value("type", "") != "ByteLevel") {
      return Unsupported(name, absl::StrCat("decoder ", j["decoder"].value("type", "<missing>")));
    }
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": ", e.what()));
  }
  return t;
}

void BpeTokenizer::PreTokenize(const std::string& text, std::vector<std::string>* pieces) const {
  std::vector<std::string> cur = {text}, next;
  for (const auto& step : pre_) {
    next.clear();
    for (std::string& piece : cur) {
      if (step->add_prefix_space && piece.rfind(' ', 0) != 0) piece.insert(0, " ");
      if (step->split) {
        step->Split(piece, &next);  // the pattern is shared; Split makes its own matcher
      } else {
        next.push_back(std::move(piece));
      }
    }
    cur.swap(next);
  }
  for (const std::string& piece : cur) {
    std::string mapped;
    for (unsigned char c : piece) mapped += ByteToChar()[c];
    pieces->push_back(std::move(mapped));
  }
}

absl::Status BpeTokenizer::EncodeWord(const std::string& mapped, std::vector<int>* ids) const {
  if (ignore_merges_) {
    if (auto it = vocab_.find(mapped); it != vocab_.end()) {
      ids->push_back(it->second);
      return absl::OkStatus();
    }
  }
  // The merge of lowest rank first, the leftmost of equal ranks, until none applies: the
  // tokenizers crate's order. Its symbols are a linked list and the candidate pairs a heap,
  // so a piece of n symbols costs O(n log n), not a rescan of every pair after each merge
  // (n^2: a 30,000-letter word took a minute, a megabyte hours). A heap entry is stale once
  // either of its symbols has merged since it was pushed (their versions tell).
  struct Symbol {
    std::string text;
    int prev, next;
    int version = 0;  // bumped by every merge into it; -1 once merged away
  };
  struct Candidate {
    int rank, left, right, left_version, right_version;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : left > o.left;
    }
  };
  std::vector<Symbol> sym;
  for (std::string& c : Chars(mapped)) {
    const int i = static_cast<int>(sym.size());
    sym.push_back({std::move(c), i - 1, i + 1});
  }
  if (!sym.empty()) sym.back().next = -1;
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> heap;
  auto push = [&](int left) {
    const int right = sym[left].next;
    if (right < 0) return;
    auto it = merge_rank_.find(absl::StrCat(sym[left].text, " ", sym[right].text));
    if (it != merge_rank_.end()) {
      heap.push({it->second, left, right, sym[left].version, sym[right].version});
    }
  };
  for (int i = 0; i + 1 < static_cast<int>(sym.size()); ++i) push(i);
  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    Symbol& l = sym[c.left];
    if (l.version != c.left_version || sym[c.right].version != c.right_version ||
        l.next != c.right) {
      continue;
    }
    Symbol& r = sym[c.right];
    l.text += r.text;
    ++l.version;
    r.version = -1;
    l.next = r.next;
    if (r.next >= 0) sym[r.next].prev = c.left;
    if (l.prev >= 0) push(l.prev);
    push(c.left);
  }
  for (int i = sym.empty() ? -1 : 0; i >= 0; i = sym[i].next) {
    auto it = vocab_.find(sym[i].text);
    if (it == vocab_.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("tokenizer: symbol \"", sym[i].text, "\" is not in the vocabulary"));
    }
    ids->push_back(it->second);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int>> BpeTokenizer::Encode(std::string_view text) const {
  // The pre-tokenizer's regex reads UTF-8 and would turn an ill-formed sequence into U+FFFD,
  // so the ids would not decode to the text; transformers cannot be given one at all.
  if (const size_t bad = InvalidUtf8Offset(text); bad != std::string_view::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("byte ", bad, " is not valid UTF-8 (a tokenizer.json tokenizer reads text)"));
  }
  std::vector<int> ids;
  std::vector<std::string> pieces;
  auto flush = [&](std::string_view plain) -> absl::Status {
    if (plain.empty()) return absl::OkStatus();
    pieces.clear();
    PreTokenize(std::string(plain), &pieces);
    for (const std::string& p : pieces) RETURN_IF_ERROR(EncodeWord(p, &ids));
    return absl::OkStatus();
  };
  size_t start = 0;
  for (size_t i = 0; i < text.size();) {
    const Added* hit = nullptr;
    // Llama 3 has 256 added tokens: only a byte one of them starts with needs the scan.
    if (added_first_[static_cast<unsigned char>(text[i])]) {
      for (const Added& a : added_) {  // longest first
        if (!a.content.empty() && text.compare(i, a.content.size(), a.content) == 0) {
          hit = &a;
          break;
        }
      }
    }
    if (hit == nullptr) {
      ++i;
      continue;
    }
    RETURN_IF_ERROR(flush(text.substr(start, i - start)));
    ids.push_back(hit->id);
    i += hit->content.size();
    start = i;
  }
  RETURN_IF_ERROR(flush(text.substr(start)));
  return ids;
}

std::string BpeTokenizer::TokenBytes(int id) const {
  for (const Added& a : added_) {
    if (a.id == id) return a.content;
  }
  auto it = id_to_token_.find(id);
  if (it == id_to_token_.end()) return "";
  std::string bytes;
  for (const std::string& c : Chars(it->second)) {
    auto b = CharToByte().find(c);
    if (b != CharToByte().end()) bytes.push_back(static_cast<char>(b->second));
  }
  return bytes;
}

std::string BpeTokenizer::Decode(const std::vector<int>& ids, bool skip_special) const {
  std::string out;
  for (int id : ids) {
    if (skip_special && IsSpecial(id)) continue;
    out += TokenBytes(id);
  }
  return out;
}

int BpeTokenizer::TokenId(const std::string& token) const {
  for (const Added& a : added_) {
    if (a.content == token) return a.id;
  }
  auto it = vocab_.find(token);
  return it == vocab_.end() ? -1 : it->second;
}

bool BpeTokenizer::IsSpecial(int id) const {
  for (const Added& a : added_) {
    if (a.id == id) return a.special;
  }
  return false;
}

}  // namespace saturn
