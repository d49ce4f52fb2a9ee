// Incremental UTF-8 assembly for streamed byte tokens. A generated stream of byte tokens can
// split a multi-byte character across deltas, and a random-weight model emits invalid byte
// sequences; protobuf `string` fields must be valid UTF-8. Utf8Stream holds back an
// unfinished trailing character and replaces invalid sequences with U+FFFD, so every piece it
// returns is valid UTF-8 on its own. Not thread-safe (one per stream).
#pragma once

#include <string>
#include <string_view>

namespace saturn {

class Utf8Stream {
 public:
  // Appends bytes and returns the text that is now complete.
  std::string Push(std::string_view bytes);
  // End of stream: an unfinished character held back becomes U+FFFD.
  std::string Flush();
  // Bytes held back (an unfinished character, at most 3).
  size_t pending_bytes() const { return pending_.size(); }

 private:
  std::string pending_;
};

}  // namespace saturn
