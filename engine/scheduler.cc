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
#include <utility>

#include "absl/types/span.h"
#include "engine/ngram_proposer.h"

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
  std::vector<BlockKey> keys;  // of the first full blocks of known tokens (prefix caching)
  int num_registered = 0;      // blocks of block_table registered (or already held) so far
  // Proposals made while speculation is off, scored as the tokens they guessed land.
  struct Shadow {
    int pos = 0;  // the position of the first proposed token
    std::vector<int> drafts;
    int matched = 0;
  };
  std::vector<Shadow> shadows;

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

void Scheduler::DropBlocks(State* s) {
  blocks_.Release(&s->block_table);
  s->num_computed = 0;
  s->num_registered = 0;
}

void Scheduler::Preempt(State* s) {
  DropBlocks(s);
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

int StepPlan::num_sample_rows() const {
  int rows = 0;
  for (const ScheduledSeq& s : seqs) rows += s.sample ? 1 + s.num_draft : 0;
  return rows;
}

std::vector<int> Scheduler::Speculate(State* s, int budget, int rows_left, int blocks_kept,
                                      StepPlan* plan) {
  // A plain decode only: the newest token known, every one before it computed.
  if (s->pending > 0 || IsPrefill(*s)) return {};
  const int room = std::min(s->sampling.max_tokens - s->num_outputs() - 1,
                            config_.max_model_len - s->num_tokens() - 1);
  const NgramConfig ngram{config_.prompt_lookup_min, config_.prompt_lookup_max};
  if (config_.num_speculative_tokens <= 0) {
    // Scored where speculation could pay (a small batch), so a large one pays no host time.
    if (running_.size() > kShadowMaxRunning) return {};
    const int k = std::min(config_.shadow_speculative_tokens, room);
    std::vector<int> d = ProposeNgram(s->tokens, k, ngram);
    if (!d.empty()) s->shadows.push_back(State::Shadow{s->num_tokens(), std::move(d), 0});
    return {};
  }
  const int k = std::min({config_.num_speculative_tokens, room, budget - 1, rows_left - 1});
  std::vector<int> d = ProposeNgram(s->tokens, k, ngram);
  const int tokens = s->num_computed + 1 + static_cast<int>(d.size());
  // Proposals take only blocks no later request of the step may need (never a preemption).
  const int more = blocks_.BlocksFor(tokens) - static_cast<int>(s->block_table.size());
  if (d.empty() || more > blocks_.num_free() - blocks_kept ||
      !blocks_.EnsureCapacity(&s->block_table, tokens)) {
    return {};
  }
  plan->num_draft_tokens += static_cast<int>(d.size());
  return d;
}

std::vector<int> Scheduler::Verify(State* s, const ScheduledSeq& seq, const int* drawn) {
  // Row j drew the token after token_ids[j]; proposal token_ids[j + 1] stands while it is the
  // row j draw.
  int kept = 1;
  while (kept <= seq.num_draft && seq.token_ids[kept] == drawn[kept - 1]) ++kept;
  const int at = seq.start_position + 1;  // the pending token's index
  s->tokens[at] = drawn[0];
  s->tokens.insert(s->tokens.end(), drawn + 1, drawn + kept);
  // KV holds the decode token and the proposals kept; the positions after them go back.
  s->num_computed = at + kept - 1;
  blocks_.Truncate(&s->block_table, blocks_.BlocksFor(s->num_tokens()));
  return std::vector<int>(drawn, drawn + kept);
}

void Scheduler::ScoreShadows(State* s, int pos, int token) {
  for (auto it = s->shadows.begin(); it != s->shadows.end();) {
    State::Shadow& sh = *it;
    if (pos != sh.pos + sh.matched) {
      ++it;
      continue;
    }
    const bool match = sh.drafts[sh.matched] == token;
    if (match) ++sh.matched;
    if (match && sh.matched < static_cast<int>(sh.drafts.size())) {
      ++it;
      continue;
    }
    ++shadow_proposals_;
    shadow_drafted_ += static_cast<int>(sh.drafts.size());
    shadow_accepted_ += sh.matched;
    it = s->shadows.erase(it);
  }
}

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
  s->pending_sample_at = *samples;
  *samples += 1 + seq->num_draft;
}

void Scheduler::KeyBlocks(State* s, int num_blocks) const {
  const int bs = blocks_.block_size();
  for (int i = static_cast<int>(s->keys.size()); i < num_blocks; ++i) {
    const uint64_t parent = i == 0 ? config_.prefix_salt : s->keys[i - 1].hash;
    const int prompt_in_block =
        config_.key_prompt_boundary ? std::clamp(s->num_prompt - i * bs, 0, bs) : 0;
    s->keys.push_back(BlockKey::Of(
        parent, absl::MakeConstSpan(s->tokens).subspan(static_cast<size_t>(i) * bs, bs),
        static_cast<uint64_t>(prompt_in_block)));
  }
}

int Scheduler::TakeCachedPrefix(State* s) {
  // The last known token is always computed: its row samples the next one.
  int cap = s->num_tokens() - 1;
  if (s->sampling.prompt_logprobs >= 0) cap = std::min(cap, s->prompt_logprobs_done);
  const int bs = blocks_.block_size(), full = std::max(cap, 0) / bs;
  KeyBlocks(s, full);
  const std::vector<int> found =
      blocks_.FindCached(absl::MakeConstSpan(s->keys).subspan(0, static_cast<size_t>(full)));
  const int hit = static_cast<int>(found.size()) * bs;
  if (!config_.enable_prefix_caching || hit == 0) return hit;
  blocks_.AcquireCached(found, &s->block_table);
  s->num_computed = hit;
  s->num_registered = static_cast<int>(found.size());
  return hit;
}

void Scheduler::RegisterComputed(State* s) {
  const int known = s->num_tokens() - s->pending;  // pending tokens are the newest
  const int full = std::min({s->num_computed, known,
                             static_cast<int>(s->block_table.size()) * blocks_.block_size()}) /
                   blocks_.block_size();
  if (full <= s->num_registered) return;
  KeyBlocks(s, full);
  for (int i = s->num_registered; i < full; ++i) blocks_.Register(s->block_table[i], s->keys[i]);
  s->num_registered = full;
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
  plan.prefix_caching = config_.enable_prefix_caching;
  plan.shadow_proposals = std::exchange(shadow_proposals_, 0);
  plan.shadow_drafted = std::exchange(shadow_drafted_, 0);
  plan.shadow_accepted = std::exchange(shadow_accepted_, 0);
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
    // Rows for the proposals: one is kept for each sequence that may still join the step.
    const int rows_left =
        config_.max_sample_rows - samples - static_cast<int>(max_seqs - plan.seqs.size() - 1);
    const int blocks_kept = static_cast<int>(running_.size() - i - 1);  // one per later request
    const std::vector<int> drafts = Speculate(s, budget, rows_left, blocks_kept, &plan);
    AddSeq(s->id, s->tokens, s->num_computed, num_new, s->block_table, IsPrefill(*s), s->sampling,
           s->num_outputs(), &plan);
    ScheduledSeq& seq = plan.seqs.back();
    if (!drafts.empty()) {
      seq.token_ids.insert(seq.token_ids.end(), drafts.begin(), drafts.end());
      seq.num_draft = static_cast<int>(drafts.size());
      seq.block_table = s->block_table;
      plan.num_decode_tokens += seq.num_draft;
    }
    AddPromptLogprobTargets(s->tokens, s->num_prompt, s->prompt_logprobs_done,
                            s->sampling.prompt_logprobs, &seq);
    Commit(s, &seq, &samples);
    budget -= seq.num_new_tokens();
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
      const int hit = TakeCachedPrefix(s);
      const int num_new = std::min(s->num_tokens() - s->num_computed, budget);
      if (num_new > 0 && !blocks_.EnsureCapacity(&s->block_table, s->num_computed + num_new)) {
        DropBlocks(s);  // gives the cached blocks back
        break;
      }
      plan.prefix_query_tokens += s->num_tokens();
      plan.prefix_hit_tokens += hit;
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

  // The blocks this step computes, registered now that no request can take them in it.
  for (const ScheduledSeq& seq : plan.seqs) RegisterComputed(states_.at(seq.request_id).get());
  return plan;
}

std::vector<RequestUpdate> Scheduler::Update(const StepPlan& plan,
                                             const std::vector<int>& sampled) {
  std::vector<RequestUpdate> updates;
  size_t next_sample = 0;
  for (const ScheduledSeq& seq : plan.seqs) {
    if (!seq.sample) continue;  // its chunk was committed by Schedule()
    const size_t rows = 1 + static_cast<size_t>(seq.num_draft);
    const bool has_token = next_sample + rows <= sampled.size();
    const int* drawn = has_token ? &sampled[next_sample] : nullptr;
    next_sample += rows;

    auto it = states_.find(seq.request_id);
    // Finished or cancelled since Schedule(): the token is dropped. A request re-added under
    // the same id starts from 0 and has no pending token at this position.
    const int at = seq.context_len() - seq.num_draft;  // where Schedule() put the pending token
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
      std::vector<int> kept{drawn[0]};
      if (seq.num_draft > 0) {
        kept = Verify(&s, seq, drawn);
        u.num_draft = seq.num_draft;
        u.num_accepted = static_cast<int>(kept.size()) - 1;
      } else {
        s.tokens[at] = drawn[0];
      }
      // Stop conditions token by token (a later pending token is not counted); tokens kept
      // past the one that ends the request are dropped.
      for (size_t j = 0; j < kept.size() && u.finish == FinishReason::kNone; ++j) {
        const int token = kept[j], tokens_through = at + static_cast<int>(j) + 1;
        const int outputs_through = tokens_through - s.num_prompt;
        ++s.usage.completion_tokens;
        u.new_tokens.push_back(token);
        ScoreShadows(&s, tokens_through - 1, token);
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
    }
    u.usage = s.usage;
    RegisterComputed(&s);  // a block whose last computed token was pending till now
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
