// Nesting depth of a JSON text, counted before it is parsed. nlohmann's parser, dump() and
// destructor recurse once per level, so a file or body of a few hundred thousand nested
// arrays overflows the stack (or, short of that, builds a DOM of hundreds of MB): every JSON
// Saturn reads from outside is checked against a limit first.
#pragma once

#include <algorithm>
#include <exception>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace saturn {

// Deep enough for any config.json, tokenizer.json, safetensors header or recording.
inline constexpr int kMaxFileJsonDepth = 64;

// The deepest nesting of arrays and objects in `text` (brackets inside strings not counted).
inline int JsonNestingDepth(std::string_view text) {
  int depth = 0, deepest = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return deepest;
}

// INVALID_ARGUMENT naming `what` when `text` nests deeper than `max_depth`.
inline absl::Status CheckJsonDepth(std::string_view text, int max_depth, std::string_view what) {
  if (const int depth = JsonNestingDepth(text); depth > max_depth) {
    return absl::InvalidArgumentError(absl::StrCat(std::string(what), ": nests arrays and objects ",
                                                   depth, " deep; the limit is ", max_depth));
  }
  return absl::OkStatus();
}

// An nlohmann::json exception's message without its "[json.exception.type_error.302] " tag,
// for errors that name the field themselves ("type must be number, but is null").
inline std::string JsonExceptionText(const std::exception& e) {
  const std::string_view what = e.what();
  const size_t tag_end = what.find("] ");
  if (what.rfind("[json.exception.", 0) != 0 || tag_end == std::string_view::npos) {
    return std::string(what);
  }
  return std::string(what.substr(tag_end + 2));
}

}  // namespace saturn
