// Shared by the engine tests: a tiny-model CPU engine config, a synthetic request and a wait
// for the free-block mirror (updated after a step's events went out).
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
  c.event_thread = "on";  // events on their own thread, as GPU servers run (engine_test: off too)
  c.max_model_len = 256;
  c.max_num_seqs_limit = 16;
  c.max_num_batched_tokens_limit = 512;
  c.options.max_num_seqs = 16;
  c.options.max_num_batched_tokens = 64;
  c.kv_cache_bytes = 0;
  return c;
}

// A request of `n_prompt` synthetic prompt tokens that generates exactly `max_tokens` (EOS
// ignored).
inline GenerateRequest Req(int n_prompt, int max_tokens, float temperature = 0.f,
                           int64_t seed = 0) {
  GenerateRequest r;
  for (int i = 0; i < n_prompt; ++i) r.prompt.push_back(3 + (i * 37 + n_prompt) % 250);
  r.sampling.max_tokens = max_tokens;
  r.sampling.temperature = temperature;
  r.sampling.seed = seed;
  r.sampling.ignore_eos = true;
  return r;
}

inline void WaitAllBlocksFree(Engine* e) {
  for (int i = 0; i < 500 && e->info().kv.blocks_free != e->info().kv.num_blocks; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(e->info().kv.blocks_free, e->info().kv.num_blocks);
}

}  // namespace saturn::testing_engine
