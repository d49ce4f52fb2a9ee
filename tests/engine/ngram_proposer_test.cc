// The n-gram proposer: the latest earlier occurrence of the longest suffix that has one, what
// followed it, read on periodically to k tokens.
#include "engine/ngram_proposer.h"

#include <vector>

#include "gtest/gtest.h"

namespace saturn {
namespace {

TEST(NgramProposerTest, ProposesWhatFollowedTheLatestOccurrenceOfTheLongestSuffix) {
  const NgramConfig c{1, 3};
  // Suffix [7 8] occurs at 0 (then 9 10) and at 4 (then 5 6): the latest wins.
  EXPECT_EQ(ProposeNgram({7, 8, 9, 10, 7, 8, 5, 6, 1, 7, 8}, 2, c), (std::vector<int>{5, 6}));
  // [1 7 8] occurs at 0 (then 3 2 7); [7 8] occurs later, at 5 (then 4 1 7): the longer suffix
  // is tried first.
  EXPECT_EQ(ProposeNgram({1, 7, 8, 3, 2, 7, 8, 4, 1, 7, 8}, 3, c), (std::vector<int>{3, 2, 7}));
}

TEST(NgramProposerTest, ARepeatingTextGoesOnRepeatingToK) {
  const NgramConfig c{1, 4};
  // [5 6 5] last occurred at 0, followed by 6 5 and then the proposal's own period.
  EXPECT_EQ(ProposeNgram({5, 6, 5, 6, 5}, 5, c), (std::vector<int>{6, 5, 6, 5, 6}));
  EXPECT_EQ(ProposeNgram({5, 6, 5, 6, 5}, 1, c), (std::vector<int>{6}));
  EXPECT_EQ(ProposeNgram({1, 9, 9, 9}, 4, c), (std::vector<int>{9, 9, 9, 9}));  // a loop of one
  EXPECT_TRUE(ProposeNgram({5, 6, 5}, 0, c).empty());
}

TEST(NgramProposerTest, NothingWithoutAnEarlierOccurrence) {
  EXPECT_TRUE(ProposeNgram({1, 2, 3, 4}, 4, NgramConfig{1, 4}).empty());
  EXPECT_TRUE(ProposeNgram({9}, 4, NgramConfig{1, 4}).empty());
  EXPECT_TRUE(ProposeNgram({}, 4, NgramConfig{1, 4}).empty());
  // min_n 2: a single repeated token is not enough.
  EXPECT_TRUE(ProposeNgram({1, 2, 3, 2}, 4, NgramConfig{2, 4}).empty());
  EXPECT_EQ(ProposeNgram({1, 2, 3, 2}, 4, NgramConfig{1, 4}), (std::vector<int>{3, 2, 3, 2}));
}

}  // namespace
}  // namespace saturn
