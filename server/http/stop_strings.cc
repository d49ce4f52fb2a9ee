// StopStringFilter: earliest match over all stop strings, then a hold-back cut at a UTF-8
// character start.
#include "server/http/stop_strings.h"

#include <algorithm>
#include <utility>

namespace saturn {

StopStringFilter::StopStringFilter(std::vector<std::string> stops) : stops_(std::move(stops)) {
  for (const std::string& s : stops_) hold_ = std::max(hold_, s.empty() ? 0 : s.size() - 1);
}

std::string StopStringFilter::Push(std::string_view text) {
  if (stopped_) return "";
  // Only the new text and the hold-back before it can hold a match not seen before.
  const size_t search_from = pending_.size() > hold_ ? pending_.size() - hold_ : 0;
  pending_.append(text);
  size_t first = std::string::npos;
  for (const std::string& s : stops_) {
    if (s.empty()) continue;
    first = std::min(first, pending_.find(s, search_from));
  }
  if (first != std::string::npos) {
    stopped_ = true;
    std::string out = pending_.substr(0, first);
    pending_.clear();
    return out;
  }
  if (pending_.size() <= hold_) return "";
  size_t cut = pending_.size() - hold_;
  while (cut > 0 && (static_cast<unsigned char>(pending_[cut]) & 0xC0) == 0x80) --cut;
  std::string out = pending_.substr(0, cut);
  pending_.erase(0, cut);
  return out;
}

std::string StopStringFilter::Flush() {
  std::string out = std::move(pending_);
  pending_.clear();
  return stopped_ ? "" : out;
}

}  // namespace saturn
