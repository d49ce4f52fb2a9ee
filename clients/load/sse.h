// Server-sent events (the WHATWG "text/event-stream" format) as OpenAI-compatible servers
// stream completions: lines "data: {...}", an event ending at a blank line, ": comment" lines
// to ignore, and LF, CRLF or CR line ends. Bytes arrive in whatever pieces the socket gives
// (cpp-httplib's content receiver), so a line, a CRLF pair or a UTF-8 character may be split
// between two Feed calls. Pure: no I/O, no clock; one parser per stream, not thread-safe.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace saturn::clients {

struct SseEvent {
  std::string event;  // the "event:" field ("" when absent: a message)
  std::string data;   // the "data:" lines joined with "\n"
};

class SseParser {
 public:
  // Appends `bytes` and returns the events they completed, in order.
  std::vector<SseEvent> Feed(std::string_view bytes);
  // Whether bytes of an unfinished event are held (a stream that ends here was cut off).
  bool Pending() const;

 private:
  void Line(std::string_view line, std::vector<SseEvent>* out);

  std::string line_;       // the current line, without its end
  bool after_cr_ = false;  // the last byte was CR: an LF next belongs to it
  bool has_data_ = false;  // the event under way has a data field
  SseEvent event_;         // the event under way
};

}  // namespace saturn::clients
