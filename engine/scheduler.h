// The scheduler: one unified step in the manner of vLLM v1. Each step it walks the running
// requests first (oldest first), then the waiting ones (FCFS), giving each the tokens it
// needs to catch its computed tokens up with its known tokens, under a per-step token
// budget (max_num_batched_tokens) and max_num_seqs. Long prompts are prefilled in chunks
// that share steps with decodes. When KV blocks run out, the newest running request is
// preempted (its blocks freed, to be recomputed later) and put at the front of the queue.
// A step never holds more than max_num_seqs sequences: when the limit is lowered below the
// number running, the newest ones are paused (they keep their KV blocks and are scheduled
// again, oldest first, as older requests finish).
//
// Prefix caching (block_manager.h): every full block of known tokens whose KV is computed is
// registered under a key chained over the tokens before it; a request admitted from the queue
// (new, or preempted) first takes the longest run of cached blocks that starts its tokens and
// computes only the rest. At least its last token is always computed (it samples the next), and
// a request that asks for prompt logprobs takes no block whose logprobs it has not produced.
// Blocks computed in a step are registered at the end of Schedule(), so no request takes them
// until a later step, which the device runs after the one that writes them.
//
// Speculative decoding (n-gram lookup, engine/ngram_proposer.h): a decoding request appends up
// to num_speculative_tokens proposed tokens to its one decode token; the step samples a row at
// each of those positions (output index sample_step, sample_step + 1, ...), and Update() keeps
// the proposals up to the first one the model's own draw disagrees with, plus that draw. For a
// proposer that names one token (no distribution) this is the rejection rule of Leviathan et
// al. (2023) exactly: a proposal is kept with the probability the model gives it, and a draw that
// disagrees comes from the model's distribution without the proposal. Greedy or seeded, each
// token is the one the model draws at its position without speculation. The KV of the positions
// not kept is discarded (num_computed goes back; the blocks past it are returned). Speculation
// needs each request's tokens known when the next step is scheduled, so it runs with the plain
// loop (not the overlapped one); a request asking for logprobs gets each kept token's. Off,
// proposals are still made for every decode and scored against the tokens that follow
// (StepPlan::shadow_*), so the plan can weigh turning it on.
//
// Pure, deterministic CPU code: Schedule() returns a plain StepPlan, Update() takes the
// runner's sampled tokens. No timing, no threads, no device.
//
// Schedule() commits the plan: the chunks count as computed and each sampled token is a
// placeholder (kPendingToken) until Update() fills it. So one step may be scheduled while the
// step before it still runs (the engine's overlapped loop, as vLLM v1's async scheduling): a
// request whose last token is still pending decodes it as its next input (ScheduledSeq::
// feed_from: the runner takes it from the previous step's sampled tokens); a request that
// will end by length when its pending token lands is not scheduled again (its blocks and its
// place among the running are freed at once, as the plain order would have); one that ends on a
// stop token computes one row for nothing, which Update() discards. Called in turn (Schedule,
// Update, Schedule, ...), every plan is exactly what it was without placeholders.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <unordered_map>
#include <vector>

#include "engine/block_manager.h"
#include "engine/engine_options.h"
#include "engine/request.h"

namespace saturn {

struct SchedulerConfig {
  int max_num_seqs = 64;
  int max_num_batched_tokens = 2048;
  int max_model_len = 2048;
  int eos_token_id = 2;
  std::vector<int> extra_eos_token_ids;  // ModelConfig's: each stops a request as EOS does
  // Take cached blocks (false: blocks are still keyed and registered, and the reuse that was
  // possible is counted in StepPlan::prefix_hit_tokens, but never taken).
  bool enable_prefix_caching = true;
  // In the first block's key: what else the KV depends on (the checkpoint, the cache dtype).
  uint64_t prefix_salt = 0;
  // Key each block on where the prompt ends in it. The batch-invariant CPU kernels compute a
  // generated position's attention row as the decode step does, unlike a prompt row
  // (docs/CPU.md), so a request's generated KV is the same bits only for itself (after a
  // preemption), never as another request's prompt. Off where bits are not kept anyway.
  bool key_prompt_boundary = true;
  // Speculative decoding: tokens proposed per decoding request and step (0: off).
  int num_speculative_tokens = 0;
  int prompt_lookup_min = 1, prompt_lookup_max = 4;          // n-gram lengths the proposer matches
  int shadow_speculative_tokens = kScoredSpeculativeTokens;  // scored while off (0: none)
  int max_sample_rows = 1 << 30;  // rows a step may sample (the runner's buffers)
};

// One sequence's share of a step.
struct ScheduledSeq {
  int64_t request_id = 0;
  std::vector<int> token_ids;    // the chunk's input tokens (num_new_tokens of them)
  int start_position = 0;        // position of token_ids[0] == tokens already computed
  int num_prompt = 0;            // the request's prompt length: generated tokens start there
  std::vector<int> block_table;  // covers start_position + token_ids.size() tokens
  bool is_prefill = false;       // chunk computes tokens the request already knew (prompt or
                                 // recompute after preemption) rather than one decode token
  bool sample = false;           // chunk ends at the last known token: sample the next one
  // >= 0: token_ids.back() is the token the previous plan samples at this index of its
  // sampled tokens (Update() for it has not run yet; token_ids holds kPendingToken there).
  int feed_from = -1;
  // Sampling inputs when sample is true.
  SamplingParams sampling;
  int sample_step = 0;  // index of the output token being drawn (0 = first)
  // Speculation: the last num_draft of token_ids are proposed tokens; rows sample at each of
  // the last num_draft + 1 positions (sample_step, sample_step + 1, ...).
  int num_draft = 0;
  // Prompt logprobs (only when the request asks): chunk row prompt_logprob_row + j predicts
  // prompt token prompt_logprob_targets[j]. Rows whose logprobs an earlier chunk already
  // produced (before a preemption) are skipped.
  int prompt_logprobs = -1;  // top-N for those rows
  int prompt_logprob_row = 0;
  std::vector<int> prompt_logprob_targets;

  int num_new_tokens() const { return static_cast<int>(token_ids.size()); }
  int context_len() const { return start_position + num_new_tokens(); }
};

struct StepPlan {
  std::vector<ScheduledSeq> seqs;  // running requests first, then newly admitted ones
  int num_prefill_tokens = 0;
  int num_decode_tokens = 0;
  std::vector<int64_t> preempted;  // preempted during this Schedule() call
  // Prefix caching, over the requests admitted from the queue this step: their known tokens
  // (looked up) and those found in cached blocks (taken when prefix_caching, else the reuse
  // missed).
  int prefix_query_tokens = 0;
  int prefix_hit_tokens = 0;
  bool prefix_caching = false;
  // Speculation: tokens proposed in this plan (num_speculative_tokens > 0). Off, the proposals
  // scored since the last plan: how many were made (each of up to shadow_speculative_tokens
  // tokens) and how many of their tokens matched the model's next tokens in a row.
  int num_draft_tokens = 0;
  int shadow_proposals = 0, shadow_drafted = 0, shadow_accepted = 0;
  int num_sample_rows() const;

  bool empty() const { return seqs.empty(); }
  int num_tokens() const { return num_prefill_tokens + num_decode_tokens; }
};

// What happened to one request as a result of a step.
struct RequestUpdate {
  int64_t request_id = 0;
  std::vector<int> new_tokens;          // 0 or 1 token; with speculation up to num_draft + 1
  int num_draft = 0, num_accepted = 0;  // speculation: tokens proposed and kept
  FinishReason finish = FinishReason::kNone;
  Usage usage;  // running totals
};

// A token drawn by a step whose Update() has not run yet.
constexpr int kPendingToken = -1;
// Speculation off: proposals are scored only while at most this many requests run (the
// batches where speculating could pay), so larger batches spend no host time on them.
constexpr size_t kShadowMaxRunning = 32;

class Scheduler {
 public:
  Scheduler(const SchedulerConfig& config, int num_kv_blocks, int block_size);
  ~Scheduler();  // out of line: State is defined in scheduler.cc

  // Changes the step limits; takes effect at the next Schedule().
  void SetLimits(int max_num_seqs, int max_num_batched_tokens);
  // Turns taking cached blocks on or off; takes effect at the next Schedule(). The blocks stay
  // keyed either way, so turning it on finds what was computed while it was off.
  void SetPrefixCaching(bool on) { config_.enable_prefix_caching = on; }
  // Tokens proposed per decode (0: off); takes effect at the next Schedule().
  void SetSpeculativeTokens(int k) { config_.num_speculative_tokens = k; }
  const SchedulerConfig& config() const { return config_; }

  // Adds a validated request to the back of the waiting queue.
  void Add(int64_t request_id, const GenerateRequest& request);
  // Removes a request wherever it is (waiting, running, preempted) and frees its blocks.
  // Returns its usage so far, or nullopt if the id is unknown (already finished).
  std::optional<Usage> Cancel(int64_t request_id);

  // The next step's plan, committed (see the top of this file). At most one plan may await
  // its Update() when Schedule() is called.
  StepPlan Schedule();
  // sampled holds the tokens drawn for the plan's seqs that have sample == true, in plan order:
  // one each, num_draft + 1 for a seq that speculated.
  // Returns one update per scheduled request that produced a token or finished; finished
  // requests have released their blocks. Plans are updated in the order they were scheduled.
  std::vector<RequestUpdate> Update(const StepPlan& plan, const std::vector<int>& sampled);

  int num_waiting() const { return static_cast<int>(waiting_.size()); }
  int num_running() const { return static_cast<int>(running_.size()); }
  bool HasWork() const { return !waiting_.empty() || !running_.empty(); }
  const BlockManager& blocks() const { return blocks_; }
  // For synthetic probe steps between two steps (engine/measure/step_probe.h): blocks taken must be
  // returned before the next Schedule().
  BlockManager* mutable_blocks() { return &blocks_; }

 private:
  struct State;
  // Frees the state's blocks and resets it to recompute from scratch.
  void DropBlocks(State* s);
  void Preempt(State* s);  // DropBlocks, counted as a preemption
  bool IsPrefill(const State& s) const;
  bool IsEos(int token) const;
  // Commits `seq`, the chunk just planned for `s` (see scheduler.cc).
  void Commit(State* s, ScheduledSeq* seq, int* samples);
  bool CanScheduleWhilePending(const State& s) const;
  // Takes (or, caching off, counts) the cached blocks that start a request leaving the queue;
  // returns the tokens they hold.
  int TakeCachedPrefix(State* s);
  // Keys of s's first `num_blocks` full blocks (computed once, kept in s).
  void KeyBlocks(State* s, int num_blocks) const;
  // Registers the full blocks of s whose tokens are known and whose KV is computed.
  void RegisterComputed(State* s);
  // Speculation: the tokens s proposes after its decode token in this plan (none: a plain
  // decode), its KV blocks grown for them; and, off, a proposal to score (Shadow).
  std::vector<int> Speculate(State* s, int budget, int sample_rows_left, int blocks_kept,
                             StepPlan* plan);
  // Keeps what a speculating seq's rows drew: returns the tokens kept, rolls its KV back.
  std::vector<int> Verify(State* s, const ScheduledSeq& seq, const int* drawn);
  // Scores s's open shadow proposals against the token that landed at `pos`.
  void ScoreShadows(State* s, int pos, int token);
  bool EndsByLengthWhenPendingLands(const State& s) const;

  SchedulerConfig config_;
  BlockManager blocks_;
  std::unordered_map<int64_t, std::unique_ptr<State>> states_;
  std::deque<int64_t> waiting_;   // FCFS; preempted requests go to the front
  std::vector<int64_t> running_;  // admission order (oldest first)
  int shadow_proposals_ = 0, shadow_drafted_ = 0, shadow_accepted_ = 0;  // scored since the
                                                                         // last plan
};

}  // namespace saturn
