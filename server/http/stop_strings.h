// Stop strings (the OpenAI API's `stop`): generation ends where the streamed text first
// contains one of them, and the text returned ends just before it, as vLLM does. The filter
// holds back the last (longest stop - 1) bytes of text, so that a stop string split across
// two deltas is never streamed in part; held-back text is cut only at UTF-8 character starts,
// so every piece it returns is valid UTF-8 when its input is. Not thread-safe (one per stream).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace saturn {

class StopStringFilter {
 public:
  // `stops` may be empty (the filter then passes text through unchanged).
  explicit StopStringFilter(std::vector<std::string> stops);

  // Appends text; returns what may be sent now. Once a stop string appears, returns the text
  // before it and stopped() is true; later calls return "".
  std::string Push(std::string_view text);
  // End of stream: the held-back text ("" once stopped).
  std::string Flush();
  bool stopped() const { return stopped_; }

 private:
  std::vector<std::string> stops_;
  size_t hold_ = 0;  // longest stop - 1
  std::string pending_;
  bool stopped_ = false;
};

}  // namespace saturn
