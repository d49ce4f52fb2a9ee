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
#include "engine/request.h"

namespace saturn {

struct SchedulerConfig {
  int max_num_seqs = 64;
  int max_num_batched_tokens = 2048;
  int max_model_len = 2048;
  int eos_token_id = 2;
  std::vector<int> extra_eos_token_ids;  // ModelConfig's: each stops a request as EOS does
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

  bool empty() const { return seqs.empty(); }
  int num_tokens() const { return num_prefill_tokens + num_decode_tokens; }
};

// What happened to one request as a result of a step.
struct RequestUpdate {
  int64_t request_id = 0;
  std::vector<int> new_tokens;  // 0 or 1 token
  FinishReason finish = FinishReason::kNone;
  Usage usage;  // running totals
};

// A token drawn by a step whose Update() has not run yet.
constexpr int kPendingToken = -1;

class Scheduler {
 public:
  Scheduler(const SchedulerConfig& config, int num_kv_blocks, int block_size);
  ~Scheduler();  // out of line: State is defined in scheduler.cc

  // Changes the step limits; takes effect at the next Schedule().
  void SetLimits(int max_num_seqs, int max_num_batched_tokens);
  const SchedulerConfig& config() const { return config_; }

  // Adds a validated request to the back of the waiting queue.
  void Add(int64_t request_id, const GenerateRequest& request);
  // Removes a request wherever it is (waiting, running, preempted) and frees its blocks.
  // Returns its usage so far, or nullopt if the id is unknown (already finished).
  std::optional<Usage> Cancel(int64_t request_id);

  // The next step's plan, committed (see the top of this file). At most one plan may await
  // its Update() when Schedule() is called.
  StepPlan Schedule();
  // sampled[i] is the token drawn for the i-th seq of `plan` that has sample == true.
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
  void Preempt(State* s);
  bool IsPrefill(const State& s) const;
  bool IsEos(int token) const;
  // Commits `seq`, the chunk just planned for `s` (see scheduler.cc).
  void Commit(State* s, ScheduledSeq* seq, int* samples);
  bool CanScheduleWhilePending(const State& s) const;
  bool EndsByLengthWhenPendingLands(const State& s) const;

  SchedulerConfig config_;
  BlockManager blocks_;
  std::unordered_map<int64_t, std::unique_ptr<State>> states_;
  std::deque<int64_t> waiting_;   // FCFS; preempted requests go to the front
  std::vector<int64_t> running_;  // admission order (oldest first)
};

}  // namespace saturn
