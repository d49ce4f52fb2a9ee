// Utf8Stream: validation follows the Unicode well-formed byte sequence table (Unicode 15,
// table 3-7); each maximal invalid subpart becomes one U+FFFD.
#include "server/text_stream.h"

#include <cstdint>

namespace saturn {
namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";

// Sequence length from the lead byte, 0 when it cannot start a sequence.
int SequenceLength(uint8_t b) {
  if (b < 0x80) return 1;
  if (b >= 0xC2 && b <= 0xDF) return 2;
  if (b >= 0xE0 && b <= 0xEF) return 3;
  if (b >= 0xF0 && b <= 0xF4) return 4;
  return 0;
}

// Allowed range of the byte following `lead` (the second byte of the sequence).
bool SecondByteOk(uint8_t lead, uint8_t b) {
  switch (lead) {
    case 0xE0:
      return b >= 0xA0 && b <= 0xBF;
    case 0xED:
      return b >= 0x80 && b <= 0x9F;  // no UTF-16 surrogates
    case 0xF0:
      return b >= 0x90 && b <= 0xBF;
    case 0xF4:
      return b >= 0x80 && b <= 0x8F;  // <= U+10FFFF
    default:
      return b >= 0x80 && b <= 0xBF;
  }
}

}  // namespace

std::string Utf8Stream::Push(std::string_view bytes) {
  std::string buf = pending_;
  buf.append(bytes);
  pending_.clear();
  std::string out;
  out.reserve(buf.size());
  size_t i = 0;
  const size_t n = buf.size();
  while (i < n) {
    const uint8_t lead = static_cast<uint8_t>(buf[i]);
    const int len = SequenceLength(lead);
    if (len == 0) {
      out.append(kReplacement);
      ++i;
      continue;
    }
    // Count the valid continuation bytes that follow.
    int valid = 1;
    while (valid < len && i + valid < n) {
      const uint8_t b = static_cast<uint8_t>(buf[i + valid]);
      const bool ok = valid == 1 ? SecondByteOk(lead, b) : (b >= 0x80 && b <= 0xBF);
      if (!ok) break;
      ++valid;
    }
    if (valid == len) {
      out.append(buf, i, len);
      i += len;
    } else if (i + valid == n) {
      pending_ = buf.substr(i);  // a character still arriving
      break;
    } else {
      out.append(kReplacement);
      i += valid;
    }
  }
  return out;
}

std::string Utf8Stream::Flush() {
  if (pending_.empty()) return {};
  pending_.clear();
  return std::string(kReplacement);
}

}  // namespace saturn
