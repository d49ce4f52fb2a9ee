// Fuzz target: the byte-level BPE reader (engine/tokenizer/tokenizer_bpe.h) on both of its inputs.
//  - Input starting with '{': a tokenizer.json. Parsed into a tokenizer or refused with
//    INVALID_ARGUMENT / UNIMPLEMENTED, never a crash; a parsed one encodes a fixed text.
//  - Anything else: prompt text for a fixed tokenizer (every byte in its alphabet, a few
//    merges, one special token). Well-formed UTF-8 always encodes, every id is in the
//    vocabulary, and decoding gives the text back byte for byte; ill-formed UTF-8 is
//    INVALID_ARGUMENT.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "engine/tokenizer/tokenizer_bpe.h"
#include "kernels/base/utf8.h"

namespace {

// GPT-2's bytes_to_unicode as UTF-8: printable bytes stand for themselves, the rest map to
// U+0100 onwards, in byte order.
std::string ByteChar(int b, int* next_extra) {
  const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
  const int cp = printable ? b : 256 + (*next_extra)++;
  std::string out;
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
  return out;
}

std::string FixedTokenizerJson() {
  std::string vocab;
  int extra = 0, id = 0;
  std::vector<std::string> chars;
  for (int b = 0; b < 256; ++b) {
    chars.push_back(ByteChar(b, &extra));
    const std::string& c = chars.back();
    const std::string key = c == "\"" ? "\\\"" : c == "\\" ? "\\\\" : c;
    vocab += (vocab.empty() ? "" : ", ") + ("\"" + key + "\": " + std::to_string(id++));
  }
  const std::string space = chars[' '];
  const std::vector<std::pair<std::string, std::string>> merges = {
      {"a", "a"}, {"aa", "aa"}, {space, "t"}, {"h", "e"}, {space + "t", "he"}, {"i", "n"}};
  std::string merge_list;
  for (const auto& [l, r] : merges) {
    vocab += ", \"" + l + r + "\": " + std::to_string(id++);
    merge_list += (merge_list.empty() ? "" : ", ") + ("[\"" + l + "\", \"" + r + "\"]");
  }
  return R"({"model": {"type": "BPE", "vocab": {)" + vocab + R"(}, "merges": [)" + merge_list +
         R"(]}, "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false},
         "added_tokens": [{"id": )" +
         std::to_string(id) + R"(, "content": "<|end|>", "special": true}]})";
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  if (!input.empty() && input[0] == '{') {
    auto parsed = saturn::BpeTokenizer::Parse(input, "fuzz");
    if (!parsed.ok()) {
      const absl::StatusCode code = parsed.status().code();
      if (code != absl::StatusCode::kInvalidArgument && code != absl::StatusCode::kUnimplemented) {
        std::abort();
      }
      return 0;
    }
    auto ids = (*parsed)->Encode("the quick aaaa <|end|> 123 \xF0\x9F\x98\x80");
    if (ids.ok()) (void)(*parsed)->Decode(*ids);
    return 0;
  }
  static const std::unique_ptr<saturn::BpeTokenizer> fixed = [] {
    auto t = saturn::BpeTokenizer::Parse(FixedTokenizerJson(), "fixed");
    if (!t.ok()) std::abort();
    return std::move(*t);
  }();
  auto ids = fixed->Encode(input);
  if (saturn::InvalidUtf8Offset(input) != std::string_view::npos) {
    if (ids.ok() || ids.status().code() != absl::StatusCode::kInvalidArgument) std::abort();
    return 0;
  }
  if (!ids.ok()) std::abort();
  for (int id : *ids) {
    if (id < 0 || id >= fixed->vocab_size()) std::abort();
  }
  if (fixed->Decode(*ids) != input) std::abort();
  return 0;
}
