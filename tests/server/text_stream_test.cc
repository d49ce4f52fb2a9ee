// Utf8Stream: split characters are held back, invalid bytes become U+FFFD, output is always
// valid UTF-8.
#include "server/text_stream.h"

#include <gtest/gtest.h>

#include <random>
#include <string>

namespace saturn {
namespace {

const std::string kFffd = "\xEF\xBF\xBD";

// Independent validity check (the Unicode table 3-7 ranges).
bool IsValidUtf8(const std::string& s) {
  size_t i = 0;
  auto in = [&](size_t k, int lo, int hi) {
    return i + k < s.size() && static_cast<uint8_t>(s[i + k]) >= lo &&
           static_cast<uint8_t>(s[i + k]) <= hi;
  };
  while (i < s.size()) {
    const uint8_t b = s[i];
    if (b <= 0x7F) {
      i += 1;
    } else if (b >= 0xC2 && b <= 0xDF && in(1, 0x80, 0xBF)) {
      i += 2;
    } else if (b == 0xE0 && in(1, 0xA0, 0xBF) && in(2, 0x80, 0xBF)) {
      i += 3;
    } else if (((b >= 0xE1 && b <= 0xEC) || b == 0xEE || b == 0xEF) && in(1, 0x80, 0xBF) &&
               in(2, 0x80, 0xBF)) {
      i += 3;
    } else if (b == 0xED && in(1, 0x80, 0x9F) && in(2, 0x80, 0xBF)) {
      i += 3;
    } else if (b == 0xF0 && in(1, 0x90, 0xBF) && in(2, 0x80, 0xBF) && in(3, 0x80, 0xBF)) {
      i += 4;
    } else if (b >= 0xF1 && b <= 0xF3 && in(1, 0x80, 0xBF) && in(2, 0x80, 0xBF) &&
               in(3, 0x80, 0xBF)) {
      i += 4;
    } else if (b == 0xF4 && in(1, 0x80, 0x8F) && in(2, 0x80, 0xBF) && in(3, 0x80, 0xBF)) {
      i += 4;
    } else {
      return false;
    }
  }
  return true;
}

TEST(Utf8StreamTest, AsciiPassesThrough) {
  Utf8Stream s;
  EXPECT_EQ(s.Push("hello"), "hello");
  EXPECT_EQ(s.Flush(), "");
}

TEST(Utf8StreamTest, SplitCharacterIsHeldBackUntilComplete) {
  Utf8Stream s;
  const std::string saturn = "\xE2\x99\x84";  // U+2644
  EXPECT_EQ(s.Push(saturn.substr(0, 1)), "");
  EXPECT_EQ(s.pending_bytes(), 1u);
  EXPECT_EQ(s.Push(saturn.substr(1, 1)), "");
  EXPECT_EQ(s.Push(saturn.substr(2, 1) + "!"), saturn + "!");
  EXPECT_EQ(s.pending_bytes(), 0u);
}

TEST(Utf8StreamTest, InvalidBytesBecomeReplacementCharacters) {
  Utf8Stream s;
  EXPECT_EQ(s.Push("a\xFF"
                   "b"),
            "a" + kFffd + "b");
  EXPECT_EQ(s.Push("\xC0\xAF"), kFffd + kFffd);              // overlong lead, lone continuation
  EXPECT_EQ(s.Push("\xED\xA0\x80"), kFffd + kFffd + kFffd);  // surrogate
  EXPECT_EQ(s.Push("\xE2\x99"
                   "x"),
            kFffd + "x");  // truncated then ASCII
}

TEST(Utf8StreamTest, UnfinishedCharacterAtEndFlushesAsReplacement) {
  Utf8Stream s;
  EXPECT_EQ(s.Push("ok\xF0\x9F"), "ok");
  EXPECT_EQ(s.Flush(), kFffd);
  EXPECT_EQ(s.Flush(), "");
}

TEST(Utf8StreamTest, RandomBytesInRandomPiecesAlwaysGiveValidUtf8) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    Utf8Stream s;
    std::string all;
    for (int piece = 0; piece < 20; ++piece) {
      std::string bytes(rng() % 4, '\0');
      for (char& c : bytes) c = static_cast<char>(rng() % 256);
      const std::string out = s.Push(bytes);
      EXPECT_TRUE(IsValidUtf8(out));
      all += out;
    }
    all += s.Flush();
    EXPECT_TRUE(IsValidUtf8(all));
  }
}

TEST(Utf8StreamTest, ValidTextSurvivesAnySplit) {
  const std::string text = "Saturn \xE2\x99\x84 ring \xF0\x9F\xAA\x90 \xC3\xA9t\xC3\xA9";
  for (size_t cut = 0; cut <= text.size(); ++cut) {
    Utf8Stream s;
    std::string out = s.Push(text.substr(0, cut));
    out += s.Push(text.substr(cut));
    out += s.Flush();
    EXPECT_EQ(out, text) << cut;
  }
}

}  // namespace
}  // namespace saturn
