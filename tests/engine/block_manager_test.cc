// BlockManager: counting, growth, exhaustion and the all-or-nothing rule.
#include "engine/block_manager.h"

#include <set>
#include <vector>

#include "gtest/gtest.h"

namespace saturn {
namespace {

TEST(BlockManagerTest, FreshManagerIsAllFree) {
  BlockManager bm(8, 16);
  EXPECT_EQ(bm.num_blocks(), 8);
  EXPECT_EQ(bm.block_size(), 16);
  EXPECT_EQ(bm.num_free(), 8);
  EXPECT_EQ(bm.num_used(), 0);
}

TEST(BlockManagerTest, BlocksForRoundsUp) {
  BlockManager bm(4, 16);
  EXPECT_EQ(bm.BlocksFor(0), 0);
  EXPECT_EQ(bm.BlocksFor(1), 1);
  EXPECT_EQ(bm.BlocksFor(16), 1);
  EXPECT_EQ(bm.BlocksFor(17), 2);
  EXPECT_EQ(bm.BlocksFor(64), 4);
}

TEST(BlockManagerTest, EnsureCapacityGrowsOnlyWhenNeeded) {
  BlockManager bm(8, 4);
  std::vector<int> table;
  ASSERT_TRUE(bm.EnsureCapacity(&table, 3));
  EXPECT_EQ(table.size(), 1u);
  ASSERT_TRUE(bm.EnsureCapacity(&table, 4));  // still fits in one block
  EXPECT_EQ(table.size(), 1u);
  ASSERT_TRUE(bm.EnsureCapacity(&table, 5));
  EXPECT_EQ(table.size(), 2u);
  ASSERT_TRUE(bm.EnsureCapacity(&table, 2));  // never shrinks
  EXPECT_EQ(table.size(), 2u);
  EXPECT_EQ(bm.num_used(), 2);
  EXPECT_EQ(bm.num_free(), 6);
}

TEST(BlockManagerTest, FreshManagerHandsOutAscendingIds) {
  BlockManager bm(4, 2);
  std::vector<int> table;
  ASSERT_TRUE(bm.EnsureCapacity(&table, 8));
  EXPECT_EQ(table, (std::vector<int>{0, 1, 2, 3}));
}

TEST(BlockManagerTest, TablesNeverShareBlocks) {
  BlockManager bm(10, 4);
  std::vector<int> a, b, c;
  ASSERT_TRUE(bm.EnsureCapacity(&a, 9));
  ASSERT_TRUE(bm.EnsureCapacity(&b, 4));
  ASSERT_TRUE(bm.EnsureCapacity(&a, 12));
  ASSERT_TRUE(bm.EnsureCapacity(&c, 20));
  std::set<int> seen;
  for (const auto* t : {&a, &b, &c}) {
    for (int id : *t) {
      EXPECT_GE(id, 0);
      EXPECT_LT(id, 10);
      EXPECT_TRUE(seen.insert(id).second) << "block " << id << " handed out twice";
    }
  }
  EXPECT_EQ(seen.size(), 9u);
  EXPECT_EQ(bm.num_free(), 1);
}

TEST(BlockManagerTest, ExhaustionIsAllOrNothing) {
  BlockManager bm(4, 4);
  std::vector<int> a;
  ASSERT_TRUE(bm.EnsureCapacity(&a, 8));  // 2 blocks
  std::vector<int> b = {};
  EXPECT_FALSE(bm.EnsureCapacity(&b, 12));  // needs 3, only 2 free
  EXPECT_TRUE(b.empty());
  EXPECT_EQ(bm.num_free(), 2);

  // Growing an existing table past the limit leaves it untouched too.
  const std::vector<int> before = a;
  EXPECT_FALSE(bm.EnsureCapacity(&a, 17));  // needs 5 in total
  EXPECT_EQ(a, before);
  EXPECT_EQ(bm.num_free(), 2);

  EXPECT_TRUE(bm.EnsureCapacity(&a, 16));  // exactly the rest
  EXPECT_EQ(bm.num_free(), 0);
  EXPECT_FALSE(bm.EnsureCapacity(&b, 1));
  EXPECT_TRUE(b.empty());
}

TEST(BlockManagerTest, ReleaseReturnsEveryBlock) {
  BlockManager bm(6, 4);
  std::vector<int> a, b;
  ASSERT_TRUE(bm.EnsureCapacity(&a, 12));
  ASSERT_TRUE(bm.EnsureCapacity(&b, 12));
  EXPECT_EQ(bm.num_free(), 0);
  bm.Release(&a);
  EXPECT_TRUE(a.empty());
  EXPECT_EQ(bm.num_free(), 3);
  bm.Release(&b);
  EXPECT_EQ(bm.num_free(), 6);
  bm.Release(&b);  // releasing an empty table is a no-op
  EXPECT_EQ(bm.num_free(), 6);

  // Everything can be handed out again, once each.
  std::vector<int> all;
  ASSERT_TRUE(bm.EnsureCapacity(&all, 24));
  EXPECT_EQ(std::set<int>(all.begin(), all.end()).size(), 6u);
}

TEST(BlockManagerTest, ReleasedBlocksAreReusedInTheirOrder) {
  BlockManager bm(8, 1);
  std::vector<int> a, b;
  ASSERT_TRUE(bm.EnsureCapacity(&a, 3));
  ASSERT_TRUE(bm.EnsureCapacity(&b, 2));
  const std::vector<int> a_ids = a;
  bm.Release(&a);
  std::vector<int> c;
  ASSERT_TRUE(bm.EnsureCapacity(&c, 3));
  EXPECT_EQ(c, a_ids);  // free list is a stack
}

TEST(BlockManagerTest, ZeroBlocksNeverAllocates) {
  BlockManager bm(0, 16);
  std::vector<int> t;
  EXPECT_TRUE(bm.EnsureCapacity(&t, 0));
  EXPECT_FALSE(bm.EnsureCapacity(&t, 1));
  EXPECT_EQ(bm.num_free(), 0);
}

}  // namespace
}  // namespace saturn
