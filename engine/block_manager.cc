// Block manager: reference counts, a stack of plain free blocks, a queue of cached free ones.
// Allocation is all-or-nothing so a failed grow leaves the table, the free blocks and the
// cache exactly as they were.
#include "engine/block_manager.h"

#include <algorithm>

#include "kernels/base/split_mix64.h"

namespace saturn {

BlockKey BlockKey::Of(uint64_t parent, absl::Span<const int> tokens, uint64_t extra) {
  BlockKey k;
  k.parent = parent;
  k.extra = extra;
  k.tokens.assign(tokens.begin(), tokens.end());
  uint64_t h = SplitMix64(parent ^ SplitMix64(extra));
  for (int t : tokens) h = SplitMix64(h ^ static_cast<uint32_t>(t));
  k.hash = h;
  return k;
}

BlockManager::BlockManager(int num_blocks, int block_size)
    : num_blocks_(std::max(num_blocks, 0)), block_size_(std::max(block_size, 1)) {
  blocks_.resize(num_blocks_);
  // Pushed high to low so that a fresh manager hands out 0, 1, 2, ... (easier to read in
  // traces and tests).
  plain_.reserve(num_blocks_);
  for (int b = num_blocks_ - 1; b >= 0; --b) plain_.push_back(b);
}

int BlockManager::TakeFree() {
  int b;
  if (!plain_.empty()) {
    b = plain_.back();
    plain_.pop_back();
  } else {
    b = evictable_.front();
    evictable_.pop_front();
    by_hash_.erase(blocks_[b].key.hash);  // evicted: its content goes
    blocks_[b].registered = false;
    blocks_[b].key = BlockKey();
    ++evicted_;
  }
  blocks_[b].refs = 1;
  return b;
}

bool BlockManager::EnsureCapacity(std::vector<int>* table, int num_tokens) {
  const int need = BlocksFor(std::max(num_tokens, 0)) - static_cast<int>(table->size());
  if (need <= 0) return true;
  if (need > num_free()) return false;
  table->reserve(table->size() + need);
  for (int i = 0; i < need; ++i) table->push_back(TakeFree());
  return true;
}

void BlockManager::Release(std::vector<int>* table) { Truncate(table, 0); }

void BlockManager::Truncate(std::vector<int>* table, int keep) {
  // Reverse order: a table's first block ends on top of the plain stack, so a released table
  // is reused in the order it was handed out, and its last cached blocks (the least likely to
  // be shared) are evicted before its first.
  while (static_cast<int>(table->size()) > std::max(keep, 0)) {
    const int id = table->back();
    table->pop_back();
    Block& b = blocks_[id];
    if (--b.refs > 0) continue;
    if (b.registered) {
      b.in_evictable = evictable_.insert(evictable_.end(), id);
    } else {
      plain_.push_back(id);
    }
  }
}

std::vector<int> BlockManager::FindCached(absl::Span<const BlockKey> keys) const {
  std::vector<int> found;
  for (const BlockKey& k : keys) {
    auto it = by_hash_.find(k.hash);
    if (it == by_hash_.end() || !blocks_[it->second].key.SameContent(k)) break;
    found.push_back(it->second);
  }
  return found;
}

void BlockManager::AcquireCached(absl::Span<const int> blocks, std::vector<int>* table) {
  for (int id : blocks) {
    Block& b = blocks_[id];
    if (b.refs++ == 0) evictable_.erase(b.in_evictable);
    table->push_back(id);
  }
}

void BlockManager::Register(int block, const BlockKey& key) {
  Block& b = blocks_[block];
  if (b.registered || b.refs == 0 || by_hash_.count(key.hash) != 0) return;
  b.registered = true;
  b.key = key;
  by_hash_.emplace(key.hash, block);
}

}  // namespace saturn
