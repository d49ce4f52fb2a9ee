// SseParser (see sse.h): the line rules of the HTML standard's event-stream interpretation,
// for the fields a completion stream uses ("data", "event"; "id" and "retry" are ignored).
#include "clients/load/sse.h"

namespace saturn::clients {

std::vector<SseEvent> SseParser::Feed(std::string_view bytes) {
  std::vector<SseEvent> out;
  for (const char c : bytes) {
    if (after_cr_) {
      after_cr_ = false;
      if (c == '\n') continue;  // the LF of a CRLF ended the line already
    }
    if (c == '\r' || c == '\n') {
      after_cr_ = c == '\r';
      Line(line_, &out);
      line_.clear();
    } else {
      line_ += c;
    }
  }
  return out;
}

bool SseParser::Pending() const { return !line_.empty() || has_data_ || !event_.event.empty(); }

void SseParser::Line(std::string_view line, std::vector<SseEvent>* out) {
  if (line.empty()) {  // dispatch
    if (has_data_) out->push_back(std::move(event_));
    event_ = SseEvent();
    has_data_ = false;
    return;
  }
  if (line[0] == ':') return;  // a comment (keep-alives)
  const size_t colon = line.find(':');
  std::string_view field = line.substr(0, colon);
  std::string_view value;
  if (colon != std::string_view::npos) {
    value = line.substr(colon + 1);
    if (!value.empty() && value[0] == ' ') value.remove_prefix(1);
  }
  if (field == "data") {
    if (has_data_) event_.data += '\n';
    event_.data.append(value.data(), value.size());
    has_data_ = true;
  } else if (field == "event") {
    event_.event = std::string(value);
  }
}

}  // namespace saturn::clients
