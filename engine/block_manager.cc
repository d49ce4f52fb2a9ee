// Block manager: a stack of free block ids. Allocation is all-or-nothing so a failed grow
// leaves both the table and the free list exactly as they were.
#include "engine/block_manager.h"

#include <algorithm>

namespace saturn {

BlockManager::BlockManager(int num_blocks, int block_size)
    : num_blocks_(std::max(num_blocks, 0)), block_size_(std::max(block_size, 1)) {
  // Pushed high to low so that a fresh manager hands out 0, 1, 2, ... (easier to read in
  // traces and tests).
  free_.reserve(num_blocks_);
  for (int b = num_blocks_ - 1; b >= 0; --b) free_.push_back(b);
}

bool BlockManager::EnsureCapacity(std::vector<int>* table, int num_tokens) {
  const int need = BlocksFor(std::max(num_tokens, 0)) - static_cast<int>(table->size());
  if (need <= 0) return true;
  if (need > num_free()) return false;
  table->reserve(table->size() + need);
  for (int i = 0; i < need; ++i) {
    table->push_back(free_.back());
    free_.pop_back();
  }
  return true;
}

void BlockManager::Release(std::vector<int>* table) {
  // Reverse order puts the table's first block on top, so a released table is reused in
  // the order it was handed out.
  for (auto it = table->rbegin(); it != table->rend(); ++it) free_.push_back(*it);
  table->clear();
}

}  // namespace saturn
