// Shared by the engine tests: a tiny-model CPU engine config and a wait for the free-block
// mirror (updated after a step's events went out).
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "engine/engine.h"

namespace saturn::testing_engine {

inline EngineConfig TinyConfig() {
  EngineConfig c;
  c.model = "tiny";
  c.backend = "cpu";
  c.dtype = "f32";  // greedy tokens compared across batch compositions: f32 sums only
  c.num_threads = 2;
  c.max_model_len = 256;
  c.max_num_seqs_limit = 16;
  c.max_num_batched_tokens_limit = 512;
  c.options.max_num_seqs = 16;
  c.options.max_num_batched_tokens = 64;
  c.kv_cache_bytes = 0;
  return c;
}

inline void WaitAllBlocksFree(Engine* e) {
  for (int i = 0; i < 500 && e->info().kv.blocks_free != e->info().kv.num_blocks; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(e->info().kv.blocks_free, e->info().kv.num_blocks);
}

}  // namespace saturn::testing_engine
