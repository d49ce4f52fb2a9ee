// The paged KV cache's block manager: fixed-size blocks handed to sequences through block
// tables. It only counts and hands out block ids; the cache memory itself is owned by the
// model runner (engine/model_runner.h).
//
//   sequence A block table: [7, 2, 9]      cache rows (per layer, K and V alike):
//   token t of A lives in   block A[t / 16], row  A[t / 16] * 16 + t % 16
//
// An allocation that does not fit returns false and changes nothing; the scheduler decides
// what to do (preempt, wait). Not thread-safe: owned by the scheduler on the engine thread.
#pragma once

#include <cstdint>
#include <vector>

namespace saturn {

class BlockManager {
 public:
  BlockManager(int num_blocks, int block_size);

  int block_size() const { return block_size_; }
  int num_blocks() const { return num_blocks_; }
  int num_free() const { return static_cast<int>(free_.size()); }
  int num_used() const { return num_blocks_ - num_free(); }
  // Blocks needed to hold num_tokens tokens.
  int BlocksFor(int num_tokens) const { return (num_tokens + block_size_ - 1) / block_size_; }

  // Grows `table` so it covers num_tokens tokens. Returns false (table unchanged) if the
  // free blocks do not suffice.
  bool EnsureCapacity(std::vector<int>* table, int num_tokens);
  // Returns every block in `table` and clears it.
  void Release(std::vector<int>* table);

 private:
  int num_blocks_;
  int block_size_;
  std::vector<int> free_;  // stack of free block ids
};

}  // namespace saturn
