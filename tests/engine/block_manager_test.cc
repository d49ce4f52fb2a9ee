// BlockManager: counting, growth, exhaustion and the all-or-nothing rule; prefix caching's
// keys, shared blocks, reference counts and least-recently-released eviction.
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

// A table of n full blocks registered under a chain of keys over tokens first, first + 1, ...
std::vector<BlockKey> Chain(int n, int block_size, int first, uint64_t salt = 7) {
  std::vector<BlockKey> keys;
  for (int i = 0; i < n; ++i) {
    std::vector<int> t;
    for (int j = 0; j < block_size; ++j) t.push_back(first + i * block_size + j);
    keys.push_back(BlockKey::Of(i == 0 ? salt : keys.back().hash, t, 0));
  }
  return keys;
}

TEST(BlockManagerTest, KeysDependOnEverythingBefore) {
  const std::vector<BlockKey> a = Chain(2, 4, 0), b = Chain(2, 4, 0);
  EXPECT_TRUE(a[1].SameContent(b[1]));
  EXPECT_FALSE(a[1].SameContent(Chain(2, 4, 0, 8)[1]));  // another salt
  std::vector<int> t = a[0].tokens;
  t[3] = 99;  // the first block differs: so does the second's key
  const BlockKey first = BlockKey::Of(7, t, 0);
  EXPECT_NE(BlockKey::Of(first.hash, a[1].tokens, 0).hash, a[1].hash);
  EXPECT_NE(BlockKey::Of(7, a[0].tokens, 1).hash, a[0].hash);  // `extra` counts too
}

TEST(BlockManagerTest, RegisteredBlocksAreFoundSharedAndKeptAfterRelease) {
  BlockManager bm(8, 4);
  const std::vector<BlockKey> keys = Chain(3, 4, 100);
  std::vector<int> a;
  ASSERT_TRUE(bm.EnsureCapacity(&a, 12));
  for (int i = 0; i < 3; ++i) bm.Register(a[i], keys[i]);
  EXPECT_EQ(bm.num_cached(), 3);

  // Another sequence with the same first two blocks, then a different third.
  std::vector<BlockKey> other = Chain(2, 4, 100);
  other.push_back(Chain(3, 4, 500)[2]);
  const std::vector<int> found = bm.FindCached(other);
  EXPECT_EQ(found, (std::vector<int>{a[0], a[1]}));
  std::vector<int> b;
  bm.AcquireCached(found, &b);
  EXPECT_EQ(bm.ref_count(a[0]), 2);
  EXPECT_EQ(bm.num_used(), 3);  // shared blocks count once

  bm.Release(&a);  // b still holds two; a's third block is free but keeps its content
  EXPECT_EQ(bm.ref_count(b[0]), 1);
  EXPECT_EQ(bm.num_used(), 2);
  EXPECT_EQ(bm.num_evictable(), 1);
  EXPECT_EQ(bm.FindCached(keys).size(), 3u);
  bm.Release(&b);
  EXPECT_EQ(bm.num_free(), 8);
  EXPECT_EQ(bm.num_cached(), 3);

  // Found again after both released; acquiring takes them off the free blocks.
  std::vector<int> c;
  bm.AcquireCached(bm.FindCached(keys), &c);
  EXPECT_EQ(bm.num_free(), 5);
  EXPECT_EQ(bm.num_evictable(), 0);
  bm.Release(&c);
}

TEST(BlockManagerTest, PlainFreeBlocksGoFirstThenTheLeastRecentlyReleased) {
  BlockManager bm(4, 2);
  const std::vector<BlockKey> k1 = Chain(1, 2, 10), k2 = Chain(1, 2, 20);
  std::vector<int> a, b;
  ASSERT_TRUE(bm.EnsureCapacity(&a, 2));
  ASSERT_TRUE(bm.EnsureCapacity(&b, 2));
  bm.Register(a[0], k1[0]);
  bm.Register(b[0], k2[0]);
  bm.Release(&a);  // released first: evicted first
  bm.Release(&b);
  std::vector<int> c;
  ASSERT_TRUE(bm.EnsureCapacity(&c, 4));  // the two plain blocks: nothing evicted
  EXPECT_EQ(bm.num_evicted(), 0);
  EXPECT_EQ(bm.FindCached(k1).size(), 1u);
  ASSERT_TRUE(bm.EnsureCapacity(&c, 6));  // one more: k1's block goes
  EXPECT_EQ(bm.num_evicted(), 1);
  EXPECT_TRUE(bm.FindCached(k1).empty());
  EXPECT_EQ(bm.FindCached(k2).size(), 1u);
  EXPECT_FALSE(bm.EnsureCapacity(&c, 10));  // one block left, two asked: nothing changes
  EXPECT_EQ(bm.FindCached(k2).size(), 1u);
  EXPECT_EQ(bm.num_free(), 1);
  bm.Release(&c);
  EXPECT_EQ(bm.num_free(), 4);
}

TEST(BlockManagerTest, ContentIsRegisteredOnce) {
  BlockManager bm(4, 2);
  const std::vector<BlockKey> k = Chain(1, 2, 10);
  std::vector<int> a, b;
  ASSERT_TRUE(bm.EnsureCapacity(&a, 2));
  ASSERT_TRUE(bm.EnsureCapacity(&b, 2));
  bm.Register(a[0], k[0]);
  bm.Register(b[0], k[0]);  // same content computed twice: the first block keeps the key
  EXPECT_EQ(bm.num_cached(), 1);
  EXPECT_EQ(bm.FindCached(k), (std::vector<int>{a[0]}));
  bm.Release(&b);  // b's copy was never registered: a plain free block again
  EXPECT_EQ(bm.num_evictable(), 0);
  bm.Release(&a);
  EXPECT_EQ(bm.num_evictable(), 1);
}

}  // namespace
}  // namespace saturn
