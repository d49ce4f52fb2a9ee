// SseParser (clients/load/sse.h): events split at every byte boundary come out the same as
// whole; CRLF, CR and LF line ends; comment lines; multi-line data; an unfinished event is
// held, not emitted.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "clients/load/sse.h"

namespace saturn::clients {
namespace {

std::vector<std::string> Datas(const std::vector<SseEvent>& events) {
  std::vector<std::string> out;
  out.reserve(events.size());
  for (const SseEvent& e : events) out.push_back(e.data);
  return out;
}

// Feeds `stream` in pieces of `piece` bytes.
std::vector<std::string> FeedInPieces(const std::string& stream, size_t piece) {
  SseParser p;
  std::vector<std::string> out;
  for (size_t i = 0; i < stream.size(); i += piece) {
    for (const std::string& d : Datas(p.Feed(stream.substr(i, piece)))) out.push_back(d);
  }
  EXPECT_FALSE(p.Pending()) << "piece " << piece;
  return out;
}

const char* const kStream =
    ": keep-alive\r\n"
    "\r\n"
    "data: {\"choices\":[{\"text\":\"h\\u00e9\"}]}\r\n"
    "\r\n"
    "data: {\"choices\":[{\"text\":\"llo\"}]}\r\n\r\n"
    ": another comment\r\n"
    "data: {\"choices\":[],\"usage\":{\"completion_tokens\":2}}\r\n\r\n"
    "data: [DONE]\r\n\r\n";

const std::vector<std::string> kDatas = {
    "{\"choices\":[{\"text\":\"h\\u00e9\"}]}", "{\"choices\":[{\"text\":\"llo\"}]}",
    "{\"choices\":[],\"usage\":{\"completion_tokens\":2}}", "[DONE]"};

TEST(SseParserTest, EveryByteBoundaryGivesTheSameEvents) {
  const std::string stream = kStream;
  for (size_t piece = 1; piece <= stream.size(); ++piece) {
    EXPECT_EQ(FeedInPieces(stream, piece), kDatas) << "piece " << piece;
  }
}

TEST(SseParserTest, EveryTwoWaySplitGivesTheSameEvents) {
  const std::string stream = kStream;
  for (size_t cut = 0; cut <= stream.size(); ++cut) {
    SseParser p;
    std::vector<std::string> got = Datas(p.Feed(stream.substr(0, cut)));
    for (const std::string& d : Datas(p.Feed(stream.substr(cut)))) got.push_back(d);
    EXPECT_EQ(got, kDatas) << "cut at " << cut;
  }
}

TEST(SseParserTest, LfCrAndCrlfLineEndsAreAlike) {
  for (const std::string eol : {"\n", "\r", "\r\n"}) {
    const std::string s = absl::StrCat("data: a", eol, eol, "data:b", eol, eol);
    EXPECT_EQ(FeedInPieces(s, 1), (std::vector<std::string>{"a", "b"}))
        << "eol size " << eol.size();
  }
}

TEST(SseParserTest, MultiLineDataIsJoinedAndOtherFieldsKept) {
  SseParser p;
  const std::vector<SseEvent> e =
      p.Feed("event: error\nid: 7\nretry: 10\ndata: one\ndata:  two\n\n");
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0].event, "error");
  EXPECT_EQ(e[0].data, "one\n two");  // only the first space after the colon is dropped
}

TEST(SseParserTest, CommentsAndEventsWithoutDataEmitNothing) {
  SseParser p;
  EXPECT_TRUE(p.Feed(": ping\n\n:\n\nid: 3\n\n\n\n").empty());
  EXPECT_FALSE(p.Pending());
}

TEST(SseParserTest, AnUnfinishedEventIsHeldAndPending) {
  SseParser p;
  EXPECT_TRUE(p.Feed("data: {\"choices\"").empty());
  EXPECT_TRUE(p.Pending());
  EXPECT_TRUE(p.Feed(":[]}\n").empty());  // the line ended, the event did not
  EXPECT_TRUE(p.Pending());
  const std::vector<SseEvent> e = p.Feed("\n");
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0].data, "{\"choices\":[]}");
  EXPECT_FALSE(p.Pending());
}

}  // namespace
}  // namespace saturn::clients
