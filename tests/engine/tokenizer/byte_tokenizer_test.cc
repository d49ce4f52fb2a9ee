// Tests for engine/tokenizer/byte_tokenizer.h: byte round trips over all 256 values and special
// ids.
#include "engine/tokenizer/byte_tokenizer.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace saturn {
namespace {

TEST(ByteTokenizerTest, RoundTripsEveryByte) {
  std::string text;
  for (int b = 0; b < 256; ++b) text.push_back(static_cast<char>(b));
  ByteTokenizer tok;
  std::vector<int> ids = tok.Encode(text);
  ASSERT_EQ(ids.size(), 257u);
  EXPECT_EQ(ids[0], ByteTokenizer::kBos);
  for (int b = 0; b < 256; ++b) {
    EXPECT_EQ(ids[b + 1], ByteTokenizer::kByteOffset + b);
    EXPECT_TRUE(ByteTokenizer::IsByte(ids[b + 1]));
  }
  EXPECT_EQ(tok.Decode(ids), text);
}

TEST(ByteTokenizerTest, BosIsOptional) {
  ByteTokenizer tok;
  EXPECT_EQ(tok.Encode("hi", /*add_bos=*/false), (std::vector<int>{3 + 'h', 3 + 'i'}));
  EXPECT_EQ(tok.Encode("", /*add_bos=*/true), (std::vector<int>{ByteTokenizer::kBos}));
  EXPECT_TRUE(tok.Encode("", /*add_bos=*/false).empty());
}

TEST(ByteTokenizerTest, DecodeSkipsSpecialAndOutOfRangeIds) {
  ByteTokenizer tok;
  const std::vector<int> ids = {
      ByteTokenizer::kBos, 3 + 'o', ByteTokenizer::kPad, 3 + 'k', 259, 4095, -1,
      ByteTokenizer::kEos};
  EXPECT_EQ(tok.Decode(ids), "ok");
  EXPECT_FALSE(ByteTokenizer::IsByte(ByteTokenizer::kEos));
  EXPECT_FALSE(ByteTokenizer::IsByte(259));
  EXPECT_TRUE(ByteTokenizer::IsByte(258));
}

TEST(ByteTokenizerTest, Utf8SurvivesRoundTrip) {
  ByteTokenizer tok;
  const std::string text = "Saturn \xE2\x99\x84 h\xC3\xA9llo\n\t";
  auto ids = tok.Encode(text);
  ids.push_back(ByteTokenizer::kEos);
  EXPECT_EQ(tok.Decode(ids), text);
}

}  // namespace
}  // namespace saturn
