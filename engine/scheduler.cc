// The scheduler's step logic. It owns the per-request mutable state (known tokens, how many
// of them have KV computed, the block table) and must never touch the device, a clock or a
// lock: the same calls in the same order always give the same plans.
//
//   known tokens:    [ p0 p1 p2 p3 p4 | o0 o1 ]     prompt, then sampled outputs
//   num_computed:     ^^^^^^^^^^^^^^^^^^^^^         KV written for these
//   next chunk:                          [o1]       min(known - computed, budget) tokens
//
// Preemption drops the KV and resets num_computed to 0; the known tokens are kept, so the
// recompute chunk(s) end at the last output and sampling resumes at the next index.
//
// Schedule() advances num_computed and appends a kPendingToken for each chunk that samples;
// Update() writes the token over it (by position, so a request preempted meanwhile still gets
// its token) and checks the stop conditions up to that token.
#include "engine/scheduler.h"

#include <algorithm>

namespace saturn {

struct Scheduler::State {
  int64_t id = 0;
  SamplingParams sampling;
  std::vector<int> tokens;  // prompt + outputs
  int num_prompt = 0;
  int num_computed = 0;
  int prompt_logprobs_done = 0;  // positions whose next-prompt-token logprobs were produced
  std::vector<int> block_table;
  Usage usage;
  int pending = 0;             // kPendingToken entries in tokens (plans awaiting Update)
  int pending_sample_at = -1;  // the newest one's index in its plan's sampled tokens

  int num_tokens() const { return static_cast<int>(tokens.size()); }
  int num_outputs() const { return num_tokens() - num_prompt; }
};

Scheduler::Scheduler(const SchedulerConfig& config, int num_kv_blocks, int block_size)
    : config_(config), blocks_(num_kv_blocks, block_size) {}

Scheduler::~Scheduler() = default;

void Scheduler::SetLimits(int max_num_seqs, int max_num_batched_tokens) {
  config_.max_num_seqs = max_num_seqs;
  config_.max_num_batched_tokens = max_num_batched_tokens;
}

void Scheduler::Add(int64_t request_id, const GenerateRequest& request) {
  // Ids come from the engine and are unique; a reused id replaces the old request rather
  // than leaking its blocks.
  if (states_.count(request_id) != 0) Cancel(request_id);
  auto s = std::make_unique<State>();
  s->id = request_id;
  s->sampling = request.sampling;
  s->tokens = request.prompt;
  s->num_prompt = static_cast<int>(request.prompt.size());
  s->usage.prompt_tokens = s->num_prompt;
  states_.emplace(request_id, std::move(s));
  waiting_.push_back(request_id);
}

std::optional<Usage> Scheduler::Cancel(int64_t request_id) {
  auto it = states_.find(request_id);
  if (it == states_.end()) return std::nullopt;
  const Usage usage = it->second->usage;
  blocks_.Release(&it->second->block_table);
  if (auto w = std::find(waiting_.begin(), waiting_.end(), request_id); w != waiting_.end()) {
    waiting_.erase(w);
  }
  if (auto r = std::find(running_.begin(), running_.end(), request_id); r != running_.end()) {
    running_.erase(r);
  }
  states_.erase(it);
  return usage;
}

void Scheduler::Preempt(State* s) {
  blocks_.Release(&s->block_table);
  s->num_computed = 0;
  ++s->usage.num_preemptions;
}

bool Scheduler::IsEos(int token) const {
  return token == config_.eos_token_id ||
         std::find(config_.extra_eos_token_ids.begin(), config_.extra_eos_token_ids.end(), token) !=
             config_.extra_eos_token_ids.end();
}

// A chunk is prefill unless it is the single newest token of a request whose prompt is
// already in the cache, i.e. an ordinary decode step.
bool Scheduler::IsPrefill(const State& s) const {
  return s.num_computed < s.num_prompt || s.num_computed < s.num_tokens() - 1;
}

namespace {

void AddSeq(int64_t id, const std::vector<int>& tokens, int start, int num_new,
            const std::vector<int>& block_table, bool is_prefill, const SamplingParams& sampling,
            int num_outputs, StepPlan* plan) {
  ScheduledSeq seq;
  seq.request_id = id;
  seq.num_prompt = static_cast<int>(tokens.size()) - num_outputs;
  seq.token_ids.assign(tokens.begin() + start, tokens.begin() + start + num_new);
  seq.start_position = start;
  seq.block_table = block_table;
  seq.is_prefill = is_prefill;
  seq.sample = start + num_new == static_cast<int>(tokens.size());
  if (seq.sample) {
    seq.sampling = sampling;
    seq.sample_step = num_outputs;
  }
  (is_prefill ? plan->num_prefill_tokens : plan->num_decode_tokens) += num_new;
  plan->seqs.push_back(std::move(seq));
}

// Positions p in [done, num_prompt - 1) predict prompt token p + 1; the chunk's share of them.
void AddPromptLogprobTargets(const std::vector<int>& tokens, int num_prompt, int done, int top_n,
                             ScheduledSeq* seq) {
  if (top_n < 0) return;
  const int first = std::max(seq->start_position, done);
  const int last = std::min(seq->context_len(), num_prompt - 1);
  if (first >= last) return;
  seq->prompt_logprobs = top_n;
  seq->prompt_logprob_row = first - seq->start_position;
  seq->prompt_logprob_targets.assign(tokens.begin() + first + 1, tokens.begin() + last + 1);
}

}  // namespace

void Scheduler::Commit(State* s, ScheduledSeq* seq, int* samples) {
  if (s->pending > 0 && s->tokens.back() == kPendingToken &&
      seq->context_len() == s->num_tokens()) {
    seq->feed_from = s->pending_sample_at;  // decodes the token the step in flight samples
  }
  s->num_computed += seq->num_new_tokens();
  if (!seq->prompt_logprob_targets.empty()) {
    s->prompt_logprobs_done = seq->start_position + seq->prompt_logprob_row +
                              static_cast<int>(seq->prompt_logprob_targets.size());
  }
  if (!seq->sample) return;
  s->tokens.push_back(kPendingToken);
  ++s->pending;
  s->pending_sample_at = (*samples)++;
}

// A request whose newest token is pending can run only its decode of that token, and only if
// that token does not end it by length (known now; a stop token is not).
bool Scheduler::CanScheduleWhilePending(const State& s) const {
  if (s.pending == 0) return true;
  if (s.num_computed != s.num_tokens() - 1) return false;
  return !EndsByLengthWhenPendingLands(s);
}

bool Scheduler::EndsByLengthWhenPendingLands(const State& s) const {
  return s.pending > 0 &&
         (s.num_outputs() >= s.sampling.max_tokens || s.num_tokens() >= config_.max_model_len);
}

StepPlan Scheduler::Schedule() {
  StepPlan plan;
  int budget = config_.max_num_batched_tokens;
  int samples = 0;  // sampling seqs in the plan so far: the index of the next one's token

  // Running requests, oldest first, at most max_num_seqs of them: after max_num_seqs was
  // lowered, the newest running requests beyond it are paused (kept with their KV blocks, not
  // scheduled) until older ones finish. Victims are taken from the back, which is never a
  // request already scheduled this step (those are all in front of i).
  const size_t max_seqs = static_cast<size_t>(std::max(config_.max_num_seqs, 1));
  for (size_t i = 0; i < running_.size() && budget > 0 && plan.seqs.size() < max_seqs;) {
    State* s = states_.at(running_[i]).get();
    if (EndsByLengthWhenPendingLands(*s)) {
      // Done but for the token in flight: its blocks and its place go now, as they would
      // have if its update had run first (the step in flight wrote its KV before any later
      // step can reuse them). Update() still delivers the token and ends it.
      blocks_.Release(&s->block_table);
      running_.erase(running_.begin() + static_cast<std::ptrdiff_t>(i));
      continue;
    }
    const int num_new = std::min(s->num_tokens() - s->num_computed, budget);
    if (num_new <= 0 || !CanScheduleWhilePending(*s)) {
      ++i;
      continue;
    }
    bool self_preempted = false;
    while (!blocks_.EnsureCapacity(&s->block_table, s->num_computed + num_new)) {
      const int64_t victim = running_.back();
      running_.pop_back();
      Preempt(states_.at(victim).get());
      waiting_.push_front(victim);
      plan.preempted.push_back(victim);
      if (victim == s->id) {
        self_preempted = true;
        break;
      }
    }
    if (self_preempted) break;  // everything after it was preempted already
    AddSeq(s->id, s->tokens, s->num_computed, num_new, s->block_table, IsPrefill(*s), s->sampling,
           s->num_outputs(), &plan);
    AddPromptLogprobTargets(s->tokens, s->num_prompt, s->prompt_logprobs_done,
                            s->sampling.prompt_logprobs, &plan.seqs.back());
    Commit(s, &plan.seqs.back(), &samples);
    budget -= num_new;
    ++i;
  }

  // Waiting requests, strictly FCFS, only when memory was not tight this step: admitting
  // right after a preemption would just thrash.
  if (plan.preempted.empty()) {
    while (!waiting_.empty() && budget > 0 &&
           static_cast<int>(running_.size()) < config_.max_num_seqs) {
      State* s = states_.at(waiting_.front()).get();
      // Preempted while its token was in flight: it waits for that token (FCFS holds).
      if (s->pending > 0) break;
      const int num_new = std::min(s->num_tokens() - s->num_computed, budget);
      if (num_new > 0 && !blocks_.EnsureCapacity(&s->block_table, s->num_computed + num_new)) {
        break;
      }
      waiting_.pop_front();
      running_.push_back(s->id);
      if (num_new > 0) {
        AddSeq(s->id, s->tokens, s->num_computed, num_new, s->block_table, IsPrefill(*s),
               s->sampling, s->num_outputs(), &plan);
        AddPromptLogprobTargets(s->tokens, s->num_prompt, s->prompt_logprobs_done,
                                s->sampling.prompt_logprobs, &plan.seqs.back());
        Commit(s, &plan.seqs.back(), &samples);
        budget -= num_new;
      }
    }
  }

  return plan;
}

std::vector<RequestUpdate> Scheduler::Update(const StepPlan& plan,
                                             const std::vector<int>& sampled) {
  std::vector<RequestUpdate> updates;
  size_t next_sample = 0;
  for (const ScheduledSeq& seq : plan.seqs) {
    if (!seq.sample) continue;  // its chunk was committed by Schedule()
    const bool has_token = next_sample < sampled.size();
    const int token = has_token ? sampled[next_sample] : -1;
    ++next_sample;

    auto it = states_.find(seq.request_id);
    // Finished or cancelled since Schedule(): the token is dropped. A request re-added under
    // the same id starts from 0 and has no pending token at this position.
    const int at = seq.context_len();  // where Schedule() put this chunk's pending token
    if (it == states_.end()) continue;
    State& s = *it->second;
    if (at >= s.num_tokens() || s.tokens[at] != kPendingToken) continue;

    RequestUpdate u;
    u.request_id = s.id;
    --s.pending;
    if (!has_token) {
      // The runner returned fewer tokens than the plan asked for: without a token the
      // request can never advance, so finish it rather than let it hang.
      u.finish = FinishReason::kError;
    } else {
      s.tokens[at] = token;
      ++s.usage.completion_tokens;
      u.new_tokens.push_back(token);
      // Stop conditions up to this token (a later pending token is not counted).
      const int tokens_through = at + 1, outputs_through = tokens_through - s.num_prompt;
      const auto& stops = s.sampling.stop_token_ids;
      if (std::find(stops.begin(), stops.end(), token) != stops.end()) {
        u.finish = FinishReason::kStop;
      } else if (!s.sampling.ignore_eos && IsEos(token)) {
        u.finish = FinishReason::kStop;
      } else if (outputs_through >= s.sampling.max_tokens) {
        u.finish = FinishReason::kLength;
      } else if (tokens_through >= config_.max_model_len) {
        u.finish = FinishReason::kLength;
      }
    }
    u.usage = s.usage;
    if (u.finish != FinishReason::kNone) {
      blocks_.Release(&s.block_table);
      running_.erase(std::remove(running_.begin(), running_.end(), s.id), running_.end());
      // Preempted while its token was in flight, it waits in the queue.
      waiting_.erase(std::remove(waiting_.begin(), waiting_.end(), s.id), waiting_.end());
      states_.erase(it);
    }
    updates.push_back(std::move(u));
  }
  return updates;
}

}  // namespace saturn
