// Synthetic probe steps through the model runner (see step_probe.h and step_probe_run.h).
#include "engine/measure/step_probe.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "engine/measure/step_probe_run.h"
#include "engine/model_runner.h"
#include "kernels/base/clock.h"
#include "kernels/base/status_macros.h"

namespace saturn {
namespace {

// Synthetic sequences holding real KV blocks; returns them on destruction.
class ProbeSeqs {
 public:
  explicit ProbeSeqs(BlockManager* blocks) : blocks_(blocks) {}
  ~ProbeSeqs() {
    for (auto& t : tables_) blocks_->Release(&t);
  }
  // Adds one sequence covering `tokens` tokens; false (nothing taken) when the blocks are not free.
  bool Add(int tokens) {
    std::vector<int> table;
    if (!blocks_->EnsureCapacity(&table, tokens)) return false;
    tables_.push_back(std::move(table));
    return true;
  }
  // Grows sequence i to cover `tokens` tokens; false (unchanged) when the blocks are not free.
  bool Grow(size_t i, int tokens) { return blocks_->EnsureCapacity(&tables_[i], tokens); }
  const std::vector<int>& table(size_t i) const { return tables_[i]; }
  size_t size() const { return tables_.size(); }

 private:
  BlockManager* blocks_;
  std::vector<std::vector<int>> tables_;
};

// One probe shape: its plan (built once, blocks held), and the series it fills.
struct Shape {
  StepPlan plan;
  ProbeSeries series;
  double last_us = 0;  // the latest step's wall time (0: not run yet; < 0: dropped)
};

// Budget kinds: decode back to back, decode after prefill, decode at the long context, prefill.
enum Kind { kDecode = 0, kDecodeAfter = 1, kDecodeLong = 2, kPrefill = 3, kKinds = 4 };
Kind KindOf(const ProbeSeries& s, int short_context) {
  if (s.prefill) return kPrefill;
  if (s.after_prefill) return kDecodeAfter;
  return s.context > short_context ? kDecodeLong : kDecode;
}

StepPlan DecodePlan(const ProbeSeqs& seqs, size_t first, int batch, int context, int vocab) {
  StepPlan p;
  for (int i = 0; i < batch; ++i) {
    ScheduledSeq s;
    s.request_id = -1 - i;  // never a real request id (those start at 1)
    s.token_ids = {(i * 31 + 7) % vocab};
    s.start_position = context;
    s.block_table = seqs.table(first + i);
    s.sample = true;
    p.seqs.push_back(std::move(s));
  }
  p.num_decode_tokens = batch;
  return p;
}

// A prefill chunk of `tokens` rows over the first sequences of `seqs`, at most `per_seq`
// tokens each (a chunk longer than max_model_len spans several prompts, as a budget does).
StepPlan PrefillPlan(const ProbeSeqs& seqs, int tokens, int per_seq, int vocab) {
  StepPlan p;
  for (int i = 0, left = tokens; left > 0; ++i) {
    ScheduledSeq s;
    s.request_id = -1 - i;
    const int n = std::min(left, per_seq);
    for (int j = 0; j < n; ++j) s.token_ids.push_back((j * 17 + 3 + i) % vocab);
    s.block_table = seqs.table(i);
    s.num_prompt = n;  // prompt rows, tiled as served prompts are (AttentionBatch::decode_from)
    s.is_prefill = true;
    s.sample = true;
    p.seqs.push_back(std::move(s));
    left -= n;
  }
  p.num_prefill_tokens = tokens;
  return p;
}

// Runs `order` (one round) `repeats` times, each kind within its budget of step time (no
// untimed warm-up: the engine warmed up at start and the buffers exist at their upper bounds;
// the best of the repeats drops a first step's page faults). A shape not run yet is predicted
// from the previous shape of its kind scaled by the size ratio (an upper bound for steps that
// grow at most linearly); a shape whose next step would pass its kind's budget is dropped. A
// decode step timed after prefill whose paired chunk was dropped runs after the latest chunk
// that ran instead (untimed, charged to its kind); none yet: it waits for a later round.
// Runs one step of `s` and adds its wall time (returned) and its sampling ops' time to its series.
absl::StatusOr<double> TimeStep(ModelRunner* runner, Shape* s, bool per_op) {
  const double a = NowUs();
  ASSIGN_OR_RETURN(RunnerOutput out, runner->Execute(s->plan, per_op));
  const double us = NowUs() - a;
  for (const OpRecord& op : out.timing.ops) {
    if (ClassOf(op.kind) == OpClass::kSampling && op.device_begin_us >= 0) {
      s->series.sampling_us += op.device_end_us - op.device_begin_us;
    }
  }
  s->series.wall_us.push_back(us);
  return us;
}

// Share of the probe's budget for timing again the decode sizes whose best reads stalled.
constexpr double kRecheckShare = 0.15;

absl::Status RunRounds(ModelRunner* runner, const std::vector<Shape*>& order, int repeats,
                       const double (&budget_us)[kKinds], int short_context, bool per_op,
                       bool* truncated) {
  double spent[kKinds] = {0, 0, 0, 0};
  const Shape* last_prefill = nullptr;  // the latest chunk that ran
  for (int round = 0; round < repeats; ++round) {
    double prev_us[kKinds] = {0, 0, 0, 0}, prev_rows[kKinds] = {0, 0, 0, 0};
    const Shape* last = nullptr;
    for (Shape* s : order) {
      const Kind k = KindOf(s->series, short_context);
      const double expect = s->last_us > 0 ? s->last_us
                            : prev_us[k] > 0
                                ? prev_us[k] * s->series.rows / std::max(prev_rows[k], 1.0)
                                : 0;
      if (s->last_us < 0 || budget_us[k] <= 0 || spent[k] + expect > budget_us[k]) {
        // A size left out (fewer repeats is not; the long context only gives a slope).
        if (round == 0 && k != kDecodeLong) *truncated = true;
        s->last_us = -1;  // dropped: later rounds skip it
        continue;
      }
      if (k == kDecodeAfter && (last == nullptr || !last->series.prefill)) {
        if (last_prefill == nullptr) continue;
        const double a = NowUs();
        ASSIGN_OR_RETURN(RunnerOutput out, runner->Execute(last_prefill->plan, per_op));
        (void)out;
        spent[k] += NowUs() - a;
      }
      ASSIGN_OR_RETURN(s->last_us, TimeStep(runner, s, per_op));
      spent[k] += s->last_us;
      prev_us[k] = s->last_us;
      prev_rows[k] = s->series.rows;
      last = s;
      if (k == kPrefill) last_prefill = s;
    }
  }
  return absl::OkStatus();
}

// One round: every decode batch back to back (at the short context, then at the long one),
// then each prefill chunk followed by a decode step timed after it (sizes paired in order;
// with more decode batches than chunks the chunks are cycled, their extra runs timed too).
std::vector<Shape*> RoundOrder(std::vector<Shape>& decode, std::vector<Shape>& longer,
                               std::vector<Shape>& after, std::vector<Shape>& prefill) {
  std::vector<Shape*> order;
  order.reserve(decode.size() + longer.size() + after.size() +
                std::max(prefill.size(), after.size()));
  for (Shape& s : decode) order.push_back(&s);
  for (Shape& s : longer) order.push_back(&s);
  const size_t pairs = after.empty() ? prefill.size() : std::max(prefill.size(), after.size());
  for (size_t i = 0; i < pairs; ++i) {
    if (!prefill.empty()) order.push_back(&prefill[i % prefill.size()]);
    if (i < after.size()) order.push_back(&after[i]);
  }
  return order;
}

}  // namespace

absl::Status RecheckStalledSizes(const std::vector<ProbeSeries*>& series, int repeats,
                                 double budget_us,
                                 const std::function<absl::StatusOr<double>(size_t)>& time) {
  double spent = 0, prev_best = 0, prev_rows = 0;
  for (size_t i = 0; i < series.size(); ++i) {
    const ProbeSeries& s = *series[i];
    if (s.wall_us.empty()) break;  // dropped: so are the larger sizes
    auto best = [&] { return *std::min_element(s.wall_us.begin(), s.wall_us.end()); };
    while (static_cast<int>(s.wall_us.size()) < repeats && prev_best > 0 &&
           best() > prev_best * s.rows / prev_rows && spent + best() <= budget_us) {
      ASSIGN_OR_RETURN(const double us, time(i));
      spent += us;
    }
    prev_best = best(), prev_rows = s.rows;
  }
  return absl::OkStatus();
}

absl::Status StepProbeOptions::Validate() const {
  if (max_batch < 0) return absl::InvalidArgumentError("max_batch: must be >= 0");
  if (max_prefill_tokens < 0) return absl::InvalidArgumentError("max_prefill_tokens: must be >= 0");
  if (min_prefill_tokens < 0) return absl::InvalidArgumentError("min_prefill_tokens: must be >= 0");
  if (context < 0) return absl::InvalidArgumentError("context: must be >= 0");
  if (repeats < 1 || repeats > 50) return absl::InvalidArgumentError("repeats: must be in [1, 50]");
  if (budget_ms < 0 || budget_ms > 600000) {
    return absl::InvalidArgumentError("budget_ms: must be in [0, 600000]");
  }
  return absl::OkStatus();
}

std::optional<StepProbeOptions> ReprobeAfter(const EngineOptions& before,
                                             const EngineOptions& after, const StepProbe& probe,
                                             StepProbeOptions base) {
  base.min_prefill_tokens = std::max(
      {before.max_num_batched_tokens, probe.max_prefill_tokens, probe.requested_prefill_tokens});
  base.max_prefill_tokens =
      after.max_num_batched_tokens > base.min_prefill_tokens ? after.max_num_batched_tokens : 0;
  if (base.max_prefill_tokens == 0) base.min_prefill_tokens = 0;
  if (after.cuda_graphs == before.cuda_graphs) base.max_batch = 0;
  if (base.max_batch == 0 && base.max_prefill_tokens == 0) return std::nullopt;
  return base;
}

StepProbe MergeProbes(const StepProbe& old, StepProbe fresh, const StepProbeOptions& options) {
  const bool decode = options.max_batch > 0, prefill = options.max_prefill_tokens > 0;
  std::vector<ProbeSeries> kept;
  for (const ProbeSeries& s : old.series) {
    const bool stays = s.prefill ? !prefill || s.rows <= options.min_prefill_tokens : !decode;
    if (stays) kept.push_back(s);
  }
  for (ProbeSeries& s : fresh.series) kept.push_back(std::move(s));
  // Decode sizes ascending (back to back by context, then after prefill), then prefill sizes
  // ascending.
  std::stable_sort(kept.begin(), kept.end(), [](const ProbeSeries& a, const ProbeSeries& b) {
    if (a.prefill != b.prefill) return !a.prefill;
    if (a.after_prefill != b.after_prefill) return !a.after_prefill;
    if (a.context != b.context) return a.context < b.context;
    return a.rows < b.rows;
  });
  fresh.series = std::move(kept);
  if (!decode) {
    fresh.decode_context = old.decode_context;
    fresh.long_context = old.long_context;
    fresh.graphs = old.graphs;
    fresh.other_graphs = old.other_graphs;
  }
  fresh.truncated = fresh.truncated || old.truncated;
  if (!prefill) {
    fresh.requested_prefill_tokens = old.requested_prefill_tokens;
  } else if (options.min_prefill_tokens > 0) {
    fresh.requested_prefill_tokens =
        std::max(fresh.requested_prefill_tokens, old.requested_prefill_tokens);
  }
  fresh.max_batch = fresh.max_prefill_tokens = 0;
  for (const ProbeSeries& s : fresh.series) {
    int& m = s.prefill ? fresh.max_prefill_tokens : fresh.max_batch;
    m = std::max(m, s.rows);
  }
  return fresh;
}

std::vector<int> ProbeSizes(int first, int last) {
  std::vector<int> out;
  for (int s = std::max(1, first); s < last; s *= 2) out.push_back(s);
  if (last >= std::max(1, first)) out.push_back(last);
  return out;
}

std::vector<int> DecodeProbeSizes(int max_batch) {
  std::vector<int> out;
  for (int b : ProbeSizes(1, max_batch)) {
    if (!out.empty() && out.back() >= 16 && out.back() + 1 < b) out.push_back(out.back() + 1);
    out.push_back(b);
  }
  return out;
}

absl::StatusOr<StepProbe> RunStepProbe(ModelRunner* runner, BlockManager* blocks, int max_model_len,
                                       const StepProbeOptions& o) {
  RETURN_IF_ERROR(o.Validate());
  const double t0 = NowUs();
  StepProbe probe;
  probe.unix_s = UnixNowSeconds();
  probe.graphs = runner->use_graphs();
  const int vocab = std::max(1, runner->model().vocab_size);
  const int ctx = o.context > 0 ? std::min(o.context, max_model_len - 1)
                                : std::max(1, std::min(128, max_model_len / 2));
  probe.decode_context = ctx;
  ProbeSeqs seqs(blocks);
  std::vector<Shape> decode, prefill;
  // Prefill: sequences enough for the longest chunk, max_model_len tokens each (taken first:
  // they are few, the decode batches many).
  const int max_chunk = o.max_prefill_tokens;
  probe.requested_prefill_tokens = max_chunk;
  bool have_prefill_seqs = max_chunk >= 1;
  for (int left = max_chunk; left > 0 && have_prefill_seqs; left -= max_model_len) {
    have_prefill_seqs = seqs.Add(std::min(left, max_model_len));
  }
  if (max_chunk >= 1 && !have_prefill_seqs) probe.truncated = true;
  for (int c :
       have_prefill_seqs ? ProbeSizes(std::min(16, max_chunk), max_chunk) : std::vector<int>{}) {
    if (c <= o.min_prefill_tokens) continue;
    Shape s;
    s.plan = PrefillPlan(seqs, c, max_model_len, vocab);
    s.series = ProbeSeries{true, c, 0, {}};
    prefill.push_back(std::move(s));
  }
  // Decode: the largest batch takes its blocks; smaller batches reuse its sequences.
  const size_t first = seqs.size();
  const std::vector<int> batches = DecodeProbeSizes(o.max_batch);
  int held = 0;
  for (int i = 0; i < (batches.empty() ? 0 : batches.back()); ++i, ++held) {
    if (!seqs.Add(ctx + 1)) break;
  }
  for (int b : batches) {
    if (b > held) {
      probe.truncated = true;  // the KV cache's free blocks hold no more
      break;
    }
    Shape s;
    s.plan = DecodePlan(seqs, first, b, ctx, vocab);
    s.series = ProbeSeries{false, b, ctx, {}};
    decode.push_back(std::move(s));
  }
  // The same batches at a longer context, on the same sequences grown to it (as many as the
  // free blocks hold): how a decode step's time grows with its context, attention's reads and
  // the KV's share of the caches both, which plans use to move the curve to the mix's context.
  const int long_ctx = std::min(max_model_len - 1, 4 * ctx);
  std::vector<Shape> longer;
  if (2 * long_ctx >= 3 * ctx && !decode.empty()) {
    int grown = 0;
    while (grown < decode.back().series.rows && seqs.Grow(first + grown, long_ctx + 1)) ++grown;
    for (const Shape& d : decode) {
      if (d.series.rows > grown) break;
      // A slope per batch needs no stair edge: only the doubling sizes (and the last).
      const int r = d.series.rows;
      if ((r & (r - 1)) != 0 && r != decode.back().series.rows) continue;
      Shape s;
      s.plan = DecodePlan(seqs, first, d.series.rows, long_ctx, vocab);
      s.series = ProbeSeries{false, d.series.rows, long_ctx, {}};
      longer.push_back(std::move(s));
    }
    if (!longer.empty()) probe.long_context = long_ctx;
  }
  // Decode steps timed after a prefill chunk: the same plans, a series of their own.
  std::vector<Shape> after;
  if (!prefill.empty()) {
    for (const Shape& d : decode) {
      Shape s;
      s.plan = d.plan;
      s.series = ProbeSeries{false, d.series.rows, ctx, {}, true};
      after.push_back(std::move(s));
    }
  }
  // Each kind its share of the budget, so a slow prefill cannot starve the decode sizes (or
  // the reverse); a kind with nothing to run gives its share to the others.
  const double share[kKinds] = {decode.empty() ? 0 : 0.25, after.empty() ? 0 : 0.25,
                                longer.empty() ? 0 : 0.15, prefill.empty() ? 0 : 0.35};
  const double total = share[kDecode] + share[kDecodeAfter] + share[kDecodeLong] + share[kPrefill];
  double budget_us[kKinds];
  for (int k = 0; k < kKinds; ++k) {
    budget_us[k] = total > 0 ? o.budget_ms * 1e3 * share[k] / total : 0;
  }
  RETURN_IF_ERROR(RunRounds(runner, RoundOrder(decode, longer, after, prefill), o.repeats,
                            budget_us, ctx, o.per_op_timing, &probe.truncated));
  std::vector<ProbeSeries*> timed;
  for (Shape& d : decode) timed.push_back(&d.series);
  RETURN_IF_ERROR(RecheckStalledSizes(timed, o.repeats, o.budget_ms * 1e3 * kRecheckShare,
                                      [&](size_t i) -> absl::StatusOr<double> {
                                        return TimeStep(runner, &decode[i], o.per_op_timing);
                                      }));
  // The same decode batches with the other graph setting (replays differ from eager steps by
  // far more than the fitted model's launch term says: docs/CUDA.md), then the runner's own
  // setting back.
  if (o.both_graph_modes && runner->SupportsGraphs() && !decode.empty()) {
    const bool was = runner->use_graphs();
    if (runner->SetUseGraphs(!was).ok()) {
      std::vector<Shape> other, none;
      for (const Shape& d : decode) {
        Shape s;
        s.plan = d.plan;
        s.series = ProbeSeries{false, d.series.rows, ctx, {}};
        other.push_back(std::move(s));
      }
      double other_budget[kKinds] = {budget_us[kDecode], 0, 0, 0};
      bool other_truncated = false;
      const absl::Status run = RunRounds(runner, RoundOrder(other, none, none, none), o.repeats,
                                         other_budget, ctx, o.per_op_timing, &other_truncated);
      RETURN_IF_ERROR(runner->SetUseGraphs(was));
      RETURN_IF_ERROR(run);
      for (Shape& s : other) {
        if (!s.series.wall_us.empty()) probe.other_graphs.push_back(std::move(s.series));
      }
    }
  }
  if (longer.empty() || longer.front().series.wall_us.empty()) probe.long_context = 0;
  for (std::vector<Shape>* v : {&decode, &longer, &after, &prefill}) {
    for (Shape& s : *v) {
      const Kind k = KindOf(s.series, ctx);
      if (s.series.wall_us.empty()) {
        // An after-prefill size whose chunk never ran; the long context is a slope, not a size.
        if (k != kDecodeLong) probe.truncated = true;
        continue;
      }
      if (k == kDecode || k == kPrefill) {
        (s.series.prefill ? probe.max_prefill_tokens : probe.max_batch) = s.series.rows;
      }
      probe.series.push_back(std::move(s.series));
    }
  }
  probe.took_ms = (NowUs() - t0) / 1e3;
  return probe;
}

}  // namespace saturn
