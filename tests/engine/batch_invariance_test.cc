// Batch invariance end to end on the CPU backend's default: 64 greedy requests with logprobs
// (sampled and prompt), run one at a time and then all at once, give bit-identical tokens and
// logprobs, with f32 and with bf16 weights. All at once, the requests share decode steps of
// up to 64 rows and their prompts are chunked differently (the token budget is shared), so
// every GEMM row count and attention tiling the scheduler makes is exercised. Then again with a
// KV cache too small for all of them, so requests are preempted and recomputed. Last, the work
// not done: prefix caching (requests sharing prefixes, caching off and on) and n-gram
// speculation (off and on) give the same bits. No timing: it holds on a busy machine under
// ctest -j.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/engine.h"
#include "tests/engine/engine_test_util.h"

namespace saturn {
namespace {

constexpr int kRequests = 64;

struct Output {
  std::vector<int> tokens;
  std::vector<float> logprobs;  // per position: the token's, then its top alternatives'
  std::vector<int> top_ids;
};

GenerateRequest Request(int i) {
  GenerateRequest r;
  const int len = 3 + (i * 29) % 97;  // 3 .. 99 tokens, chunked by a 96-token budget
  for (int j = 0; j < len; ++j) r.prompt.push_back(3 + (i * 131 + j * 17) % 4000);
  r.sampling.max_tokens = 10;
  r.sampling.temperature = 0.f;
  r.sampling.ignore_eos = true;
  r.sampling.logprobs = 3;
  r.sampling.prompt_logprobs = 1;
  return r;
}

void Append(const std::vector<PositionLogprobs>& positions, Output* out) {
  for (const PositionLogprobs& p : positions) {
    out->logprobs.push_back(p.token.logprob);
    for (const TokenLogprob& t : p.top) {
      out->logprobs.push_back(t.logprob);
      out->top_ids.push_back(t.token_id);
    }
  }
}

Output Collect(RequestStream* s) {
  Output out;
  TokenEvent ev;
  while (s->Next(&ev)) {
    out.tokens.insert(out.tokens.end(), ev.token_ids.begin(), ev.token_ids.end());
    Append(ev.prompt_logprobs, &out);
    Append(ev.logprobs, &out);
  }
  return out;
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

class BatchInvarianceTest : public ::testing::TestWithParam<const char*> {};

// The kRequests requests one at a time, then all at once, on one engine with `dtype` weights
// and, where kv_blocks > 0, a KV cache of that many blocks (too few for all at once: requests
// are preempted and recomputed, their earlier decode positions then run as prompt rows).
void ExpectAloneEqualsTogether(const char* dtype, int kv_blocks) {
  EngineConfig c = testing_engine::TinyConfig();
  c.dtype = dtype;
  c.max_num_seqs_limit = kRequests;
  c.options.max_num_seqs = kRequests;
  c.options.max_num_batched_tokens = 96;
  if (kv_blocks > 0) {
    auto probe = Engine::Create(c);
    ASSERT_TRUE(probe.ok()) << probe.status();
    c.kv_cache_bytes = (*probe)->info().kv.bytes_per_block * static_cast<size_t>(kv_blocks);
  }
  auto e = Engine::Create(c);
  ASSERT_TRUE(e.ok()) << e.status();
  std::vector<Output> alone;
  for (int i = 0; i < kRequests; ++i) {
    auto s = RequestStream::Open(e->get(), Request(i));
    ASSERT_TRUE(s.ok()) << s.status();
    alone.push_back(Collect(s->get()));
    ASSERT_EQ(alone.back().tokens.size(), 10u) << "request " << i;
  }
  const int64_t preempted_alone = (*e)->counters().preemptions;
  std::vector<std::unique_ptr<RequestStream>> streams;
  for (int i = 0; i < kRequests; ++i) {
    auto s = RequestStream::Open(e->get(), Request(i));
    ASSERT_TRUE(s.ok()) << s.status();
    streams.push_back(std::move(*s));
  }
  int differ = 0;
  for (int i = 0; i < kRequests; ++i) {
    const Output together = Collect(streams[i].get());
    const bool same = together.tokens == alone[i].tokens && together.top_ids == alone[i].top_ids &&
                      SameBits(together.logprobs, alone[i].logprobs);
    differ += same ? 0 : 1;
    EXPECT_TRUE(same) << "request " << i << " (prompt " << Request(i).prompt.size()
                      << " tokens): tokens "
                      << (together.tokens == alone[i].tokens ? "equal" : "differ")
                      << ", logprobs differ";
  }
  EXPECT_EQ(differ, 0) << "of " << kRequests << " requests";
  // The 64 ran together: some step held many of them (fewer where the cache is short).
  int most = 0;
  for (const StepRecord& r : (*e)->steps().Since(0)) most = std::max(most, r.num_seqs);
  EXPECT_GE(most, kv_blocks > 0 ? 8 : 16);
  EXPECT_EQ(preempted_alone, 0);
  if (kv_blocks > 0)
    EXPECT_GT((*e)->counters().preemptions, 0) << "the cache was meant to be short";
  testing_engine::WaitAllBlocksFree(e->get());
}

// Request i of four families: three share a prefix of 40, 56 or 72 tokens, the fourth none;
// then 1 .. 30 tokens of its own.
GenerateRequest SharedPrefixRequest(int i) {
  GenerateRequest r;
  const int family = i % 4;
  if (family < 3) {
    for (int j = 0; j < 40 + 16 * family; ++j)
      r.prompt.push_back(3 + (family * 977 + j * 13) % 4000);
  }
  for (int j = 0; j < 1 + (i * 7) % 30; ++j) r.prompt.push_back(3 + (i * 131 + j * 17) % 4000);
  r.sampling.max_tokens = 10;
  r.sampling.ignore_eos = true;
  r.sampling.logprobs = 3;
  return r;
}

// Request i for speculation: a prompt that repeats a short phrase (n-gram lookup finds it),
// 24 output tokens; odd requests sampled at temperature 0.8 with seed i.
GenerateRequest RepetitiveRequest(int i) {
  GenerateRequest r;
  for (int rep = 0; rep < 3 + i % 3; ++rep) {
    for (int j = 0; j < 4 + i % 5; ++j) r.prompt.push_back(3 + (i * 131 + j * 17) % 4000);
  }
  r.sampling.max_tokens = 24;
  r.sampling.ignore_eos = true;
  r.sampling.logprobs = 3;
  if (i % 2 == 1) {
    r.sampling.temperature = 0.8f;
    r.sampling.seed = i;
  }
  return r;
}

struct RunStats {
  int64_t hits = 0, preemptions = 0, drafted = 0, accepted = 0;
};

// The kRequests requests made by `make`, all at once, on an engine with `options`.
std::vector<Output> RunAll(const char* dtype, EngineOptions options, int kv_blocks,
                           GenerateRequest (*make)(int), RunStats* stats) {
  EngineConfig c = testing_engine::TinyConfig();
  c.dtype = dtype;
  c.max_num_seqs_limit = 4 * kRequests;  // rows for proposals beside kRequests sequences
  options.max_num_seqs = kRequests;
  options.max_num_batched_tokens = 96;
  c.options = options;
  if (kv_blocks > 0) {
    auto probe = Engine::Create(c);
    EXPECT_TRUE(probe.ok()) << probe.status();
    if (!probe.ok()) return {};
    c.kv_cache_bytes = (*probe)->info().kv.bytes_per_block * static_cast<size_t>(kv_blocks);
  }
  auto e = Engine::Create(c);
  EXPECT_TRUE(e.ok()) << e.status();
  if (!e.ok()) return {};
  std::vector<std::unique_ptr<RequestStream>> streams;
  for (int i = 0; i < kRequests; ++i) {
    auto s = RequestStream::Open(e->get(), make(i));
    EXPECT_TRUE(s.ok()) << s.status();
    if (!s.ok()) return {};
    streams.push_back(std::move(*s));
  }
  std::vector<Output> out;
  for (auto& s : streams) out.push_back(Collect(s.get()));
  stats->hits = (*e)->counters().prefix_cache_hits;
  stats->preemptions = (*e)->counters().preemptions;
  for (const StepRecord& r : (*e)->steps().Since(0)) {
    stats->drafted += r.spec_draft_tokens;
    stats->accepted += r.spec_accepted_tokens;
  }
  testing_engine::WaitAllBlocksFree(e->get());
  return out;
}

void ExpectSameBits(const std::vector<Output>& a, const std::vector<Output>& b, size_t tokens,
                    const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].tokens.size(), tokens) << what;
    EXPECT_TRUE(a[i].tokens == b[i].tokens && a[i].top_ids == b[i].top_ids &&
                SameBits(a[i].logprobs, b[i].logprobs))
        << "request " << i << ", " << what;
  }
}

TEST_P(BatchInvarianceTest, PrefixCachingGivesTheSameBits) {
  RunStats stats;
  EngineOptions o;
  o.prefix_caching = false;
  const std::vector<Output> off = RunAll(GetParam(), o, 0, SharedPrefixRequest, &stats);
  EXPECT_EQ(stats.hits, 0);
  o.prefix_caching = true;
  for (const int kv_blocks : {0, 40}) {
    const std::vector<Output> on = RunAll(GetParam(), o, kv_blocks, SharedPrefixRequest, &stats);
    EXPECT_GT(stats.hits, 0) << "kv_blocks " << kv_blocks;
    if (kv_blocks > 0) EXPECT_GT(stats.preemptions, 0) << "the cache was meant to be short";
    ExpectSameBits(on, off, 10, absl::StrCat("kv_blocks ", kv_blocks));
  }
}

// Greedy and seeded requests with logprobs, with n-gram speculation off and on (and on with a
// short cache): the same tokens and logprobs, bit for bit, while proposals were kept.
TEST_P(BatchInvarianceTest, SpeculationGivesTheSameBits) {
  RunStats stats;
  EngineOptions o;
  const std::vector<Output> off = RunAll(GetParam(), o, 0, RepetitiveRequest, &stats);
  EXPECT_EQ(stats.drafted, 0);
  o.num_speculative_tokens = 4;
  for (const int kv_blocks : {0, 24}) {
    const std::vector<Output> on = RunAll(GetParam(), o, kv_blocks, RepetitiveRequest, &stats);
    EXPECT_GT(stats.accepted, 0) << "kv_blocks " << kv_blocks;
    if (kv_blocks > 0) EXPECT_GT(stats.preemptions, 0) << "the cache was meant to be short";
    ExpectSameBits(on, off, 24, absl::StrCat("speculation, kv_blocks ", kv_blocks));
  }
}

TEST_P(BatchInvarianceTest, AloneAndBesideSixtyThreeOthersGiveTheSameBits) {
  ExpectAloneEqualsTogether(GetParam(), 0);
}

// 48 blocks of 16 tokens hold the longest request (109 tokens: 7 blocks) but not all 64.
TEST_P(BatchInvarianceTest, PreemptedAndRecomputedGiveTheSameBits) {
  ExpectAloneEqualsTogether(GetParam(), 48);
}

INSTANTIATE_TEST_SUITE_P(Weights, BatchInvarianceTest, ::testing::Values("f32", "bf16"),
                         [](const ::testing::TestParamInfo<const char*>& info) {
                           return std::string(info.param);
                         });

}  // namespace
}  // namespace saturn
