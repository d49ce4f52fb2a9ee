// StopStringFilter: matches across pieces, the hold-back, UTF-8 boundaries, several stops.
#include "server/http/stop_strings.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace saturn {
namespace {

// Feeds `pieces` and returns everything the filter let out (Flush included).
std::string Filtered(StopStringFilter& f, const std::vector<std::string>& pieces) {
  std::string out;
  for (const std::string& p : pieces) out += f.Push(p);
  out += f.Flush();
  return out;
}

TEST(StopStringFilterTest, NoStopsPassesTextThroughAtOnce) {
  StopStringFilter f({});
  EXPECT_EQ(f.Push("abc"), "abc");
  EXPECT_EQ(f.Push("def"), "def");
  EXPECT_EQ(f.Flush(), "");
  EXPECT_FALSE(f.stopped());
}

TEST(StopStringFilterTest, StopInsideOnePieceCutsBeforeIt) {
  StopStringFilter f({"END"});
  EXPECT_EQ(Filtered(f, {"hello END world"}), "hello ");
  EXPECT_TRUE(f.stopped());
  EXPECT_EQ(f.Push("more"), "");
}

TEST(StopStringFilterTest, StopSplitAcrossPiecesIsNeverStreamedInPart) {
  StopStringFilter f({"STOP"});
  std::string streamed;
  for (const char* p : {"ab", "cS", "T", "O", "Pzz"}) {
    const std::string out = f.Push(p);
    EXPECT_EQ(out.find('S'), std::string::npos) << "streamed part of the stop: " << out;
    streamed += out;
  }
  EXPECT_TRUE(f.stopped());
  EXPECT_EQ(streamed, "abc");
}

TEST(StopStringFilterTest, HeldBackTextComesOutWhenNoStopFollows) {
  StopStringFilter f({"xyz"});
  EXPECT_EQ(f.Push("abcx"), "ab");  // "cx" could start "xyz"
  EXPECT_EQ(f.Push("y1"), "cx");
  EXPECT_EQ(f.Flush(), "y1");
  EXPECT_FALSE(f.stopped());
}

TEST(StopStringFilterTest, EarliestOfSeveralStopsWins) {
  StopStringFilter f({"world", "lo"});
  EXPECT_EQ(Filtered(f, {"hello world"}), "hel");
}

TEST(StopStringFilterTest, HoldBackNeverSplitsAUtf8Character) {
  StopStringFilter f({"abc"});                  // holds back 2 bytes
  const std::string out = f.Push("x\xC3\xA9");  // "xé": a cut at 2 bytes back would split é
  EXPECT_EQ(out, "x");
  EXPECT_EQ(f.Flush(), "\xC3\xA9");
}

TEST(StopStringFilterTest, MultiByteStopMatches) {
  StopStringFilter f({"\xE6\x9D\xB1"});  // 東
  EXPECT_EQ(Filtered(f, {"ab\xE6\x9D",
                         "\xB1"
                         "cd"}),
            "ab");
  EXPECT_TRUE(f.stopped());
}

}  // namespace
}  // namespace saturn
