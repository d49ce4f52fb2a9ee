// The paged KV cache's block manager: fixed-size blocks handed to sequences through block
// tables, reference-counted so that full blocks can be shared between sequences (prefix
// caching). It only counts and hands out block ids; the cache memory itself is owned by the
// model runner (engine/model_runner.h).
//
//   sequence A block table: [7, 2, 9]      cache rows (per layer, K and V alike):
//   token t of A lives in   block A[t / 16], row  A[t / 16] * 16 + t % 16
//
// Prefix caching, as vLLM v1's KV cache manager: a full block whose KV is computed may be
// registered under the key of its content (BlockKey: the key of the block before it, the
// tokens in it, and a salt for whatever else changes the KV). A sequence that starts with the
// same tokens takes those blocks instead of computing them (AcquireCached). A released block
// keeps its content while nothing needs the memory: free blocks that hold content are evicted
// least recently released first, and only when no plain free block is left.
//
//   free blocks:  plain   [stack: the newest released first]       handed out first
//                 cached  [queue: least recently released first]   evicted when plain is empty
//
// An allocation that does not fit returns false and changes nothing; the scheduler decides
// what to do (preempt, wait). Not thread-safe: owned by the scheduler on the engine thread.
#pragma once

#include <cstdint>
#include <list>
#include <unordered_map>
#include <vector>

#include "absl/types/span.h"

namespace saturn {

// What a full block's KV depends on: every token before it (through `parent`, the previous
// block's hash, or the salt for the first block), its own tokens, and `extra` (see
// Scheduler: the split between prompt and generated positions where that changes the bits).
struct BlockKey {
  uint64_t hash = 0;
  uint64_t parent = 0;
  uint64_t extra = 0;
  std::vector<int> tokens;

  // The key of the block holding `tokens` after the block whose hash is `parent`.
  static BlockKey Of(uint64_t parent, absl::Span<const int> tokens, uint64_t extra);
  bool SameContent(const BlockKey& o) const {
    return hash == o.hash && parent == o.parent && extra == o.extra && tokens == o.tokens;
  }
};

class BlockManager {
 public:
  BlockManager(int num_blocks, int block_size);

  int block_size() const { return block_size_; }
  int num_blocks() const { return num_blocks_; }
  // Blocks no sequence holds (plain free and cached free alike: both can be handed out).
  int num_free() const { return static_cast<int>(plain_.size() + evictable_.size()); }
  int num_used() const { return num_blocks_ - num_free(); }
  // Blocks that hold registered content (held by sequences or free and evictable).
  int num_cached() const { return static_cast<int>(by_hash_.size()); }
  int num_evictable() const { return static_cast<int>(evictable_.size()); }
  int64_t num_evicted() const { return evicted_; }
  // Blocks needed to hold num_tokens tokens.
  int BlocksFor(int num_tokens) const { return (num_tokens + block_size_ - 1) / block_size_; }
  // Sequences holding `block` (0: free).
  int ref_count(int block) const { return blocks_[block].refs; }

  // Grows `table` so it covers num_tokens tokens with fresh blocks. Returns false (table
  // unchanged) if the free blocks do not suffice.
  bool EnsureCapacity(std::vector<int>* table, int num_tokens);
  // Drops the table's hold on each of its blocks and clears it. A block no one holds any more
  // becomes free; one with registered content keeps it until evicted.
  void Release(std::vector<int>* table);
  // Releases the table's blocks past its first `keep` (as Release does for a whole table).
  void Truncate(std::vector<int>* table, int keep);

  // The longest run of registered blocks whose content is keys[0], keys[1], ... (no hold is
  // taken: AcquireCached takes them).
  std::vector<int> FindCached(absl::Span<const BlockKey> keys) const;
  // Appends `blocks` (from FindCached, before any other change) to `table`, taking a hold on
  // each.
  void AcquireCached(absl::Span<const int> blocks, std::vector<int>* table);
  // Registers held `block`, full and its KV computed, as holding `key`'s content. A block
  // already registered, or content already held by another block, is left as it is.
  void Register(int block, const BlockKey& key);

 private:
  struct Block {
    int refs = 0;
    bool registered = false;
    BlockKey key;
    std::list<int>::iterator in_evictable;  // valid when free and registered
  };
  int TakeFree();  // a free block, evicting the least recently released cached one if need be

  int num_blocks_;
  int block_size_;
  std::vector<Block> blocks_;
  std::vector<int> plain_;    // free blocks without content, stack
  std::list<int> evictable_;  // free blocks with content, oldest release first
  std::unordered_map<uint64_t, int> by_hash_;
  int64_t evicted_ = 0;
};

}  // namespace saturn
