// The KL divergence of one model's next-token distributions against another's over a fixed
// token stream, as llama.cpp's `llama-perplexity --kl-divergence` reports it: two ModelRunners
// (a reference, e.g. f32 weights, and a candidate, e.g. q8_0) run the same teacher-forced step
// plans over each chunk of the stream, every scored row's full-vocabulary logits come back
// (ModelRunner::ExecuteWithLogits; every row of a chunk samples, as a speculating sequence's
// proposal rows do), and each row is compared in double: KL(ref || candidate), -ln p of the
// next token under each, and whether both put their maximum on the same token.
//
// The stream is a list of chunks of `context` tokens, each starting with BOS, as
// llama-perplexity splits its text; in each chunk, rows [score_from, context - 1) are scored
// (row t's distribution predicts token t + 1), the rows before only give context
// (llama-perplexity scores the second half: score_from = context / 2). SampleChunks makes such
// a stream from the reference model itself (temperature 1, a fixed seed); ChunksFromTokens cuts
// a tokenized text into it.
//
// Header-only, shared by saturn-bench-kl (bench/kl_bench.cc) and its test
// (tests/engine/kl_eval_test.cc). Never used by the server: it drives runners by hand.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "engine/model_runner.h"
#include "engine/scheduler.h"
#include "kernels/base/split_mix64.h"
#include "kernels/base/status_macros.h"

namespace saturn::bench {

struct KlOptions {
  int context = 512;        // tokens per chunk (llama-perplexity's -c)
  int score_from = 256;     // first scored row of a chunk (llama-perplexity: context / 2)
  int rows_per_step = 128;  // scored rows (full-vocabulary logits) per step
  int block_size = 16;
  int sample_batch = 32;  // chunks SampleChunks decodes side by side
};

// A runner configuration that holds the steps of CompareRunners, and of SampleChunks where
// `samples` (its KV cache then holds o.sample_batch chunks, else one).
inline RunnerConfig KlRunnerConfig(const KlOptions& o, bool samples = true) {
  const int rows = std::max(o.rows_per_step, o.sample_batch);
  const int blocks_per_chunk = (o.context + o.block_size - 1) / o.block_size;
  return RunnerConfig{.max_num_seqs_limit = rows,
                      .max_num_batched_tokens_limit = std::max({rows, o.score_from, 1}),
                      .max_model_len = o.context,
                      .block_size = o.block_size,
                      .num_kv_blocks = blocks_per_chunk * (samples ? o.sample_batch : 1),
                      .graph_sizes = {}};
}

inline absl::Status CheckKlOptions(const KlOptions& o) {
  if (o.context < 2 || o.score_from < 0 || o.score_from > o.context - 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("context ", o.context, ", score_from ", o.score_from,
                     ": need context >= 2 and 0 <= score_from <= context - 2"));
  }
  if (o.rows_per_step < 1 || o.sample_batch < 1 || o.block_size < 1) {
    return absl::InvalidArgumentError("rows_per_step, sample_batch, block_size: must be >= 1");
  }
  return absl::OkStatus();
}

// Scored rows per chunk.
inline int ScoredPerChunk(const KlOptions& o) { return o.context - 1 - o.score_from; }

// One scored position.
struct KlRow {
  double kl = 0;                  // KL(ref || candidate) of the next-token distributions, nats
  double nll_ref = 0, nll_q = 0;  // -ln p(next token) under each
  double p_ref = 0, p_q = 0;      // p(next token) under each
  bool same_top = false;          // both argmax (first maximum) on the same token
};

// Compares two logit rows over the whole vocabulary; log-softmax in double.
inline KlRow CompareRow(const float* ref, const float* q, int vocab, int target) {
  int top_r = 0, top_q = 0;
  for (int i = 1; i < vocab; ++i) {
    if (ref[i] > ref[top_r]) top_r = i;
    if (q[i] > q[top_q]) top_q = i;
  }
  const double max_r = ref[top_r], max_q = q[top_q];
  double sum_r = 0, sum_q = 0;
  for (int i = 0; i < vocab; ++i) {
    sum_r += std::exp(double{ref[i]} - max_r);
    sum_q += std::exp(double{q[i]} - max_q);
  }
  const double lse_r = max_r + std::log(sum_r), lse_q = max_q + std::log(sum_q);
  double kl = 0;
  for (int i = 0; i < vocab; ++i) {
    const double lr = double{ref[i]} - lse_r, lq = double{q[i]} - lse_q;
    kl += std::exp(lr) * (lr - lq);
  }
  KlRow row;
  row.kl = std::max(kl, 0.0);  // rounding may leave -1e-17 where the rows are equal
  row.nll_ref = lse_r - double{ref[target]};
  row.nll_q = lse_q - double{q[target]};
  row.p_ref = std::exp(-row.nll_ref);
  row.p_q = std::exp(-row.nll_q);
  row.same_top = top_r == top_q;
  return row;
}

// What llama-perplexity --kl-divergence prints, over the scored rows. Standard errors are
// llama.cpp's: sqrt(var / (n - 1)) of the per-row values; PPL's is PPL x that of ln PPL.
struct KlSummary {
  int64_t positions = 0;
  double mean_kl = 0, mean_kl_se = 0;
  double max_kl = 0, p999_kl = 0, p99_kl = 0, median_kl = 0, p10_kl = 0, min_kl = 0;
  double same_top = 0, same_top_se = 0;  // fraction of rows whose argmax agrees
  double ppl_ref = 0, ppl_ref_se = 0, ppl_q = 0, ppl_q_se = 0;
  double ln_ppl_ratio = 0, ln_ppl_ratio_se = 0;  // mean of nll_q - nll_ref
  double ppl_ratio = 0;                          // ppl_q / ppl_ref
  double mean_dp = 0, rms_dp = 0;                // p_q - p_ref of the next token
};

// The value at `fraction` of the sorted values, linear between neighbours (as llama.cpp's
// percentile).
inline double Percentile(const std::vector<double>& sorted, double fraction) {
  if (sorted.empty()) return 0;
  const double p = fraction * static_cast<double>(sorted.size() - 1);
  const size_t lo = static_cast<size_t>(p);
  const size_t hi = std::min(lo + 1, sorted.size() - 1);
  return sorted[lo] + (p - static_cast<double>(lo)) * (sorted[hi] - sorted[lo]);
}

inline KlSummary Summarize(const std::vector<KlRow>& rows) {
  KlSummary s;
  const double n = static_cast<double>(rows.size());
  s.positions = static_cast<int64_t>(rows.size());
  if (rows.empty()) return s;
  // Mean and standard error of the mean of one per-row value.
  auto mean_se = [&](auto value, double* mean, double* se) {
    double sum = 0, sum2 = 0;
    for (const KlRow& r : rows) {
      const double v = value(r);
      sum += v;
      sum2 += v * v;
    }
    *mean = sum / n;
    *se = n > 1 ? std::sqrt(std::max(0.0, sum2 / n - *mean * *mean) / (n - 1)) : 0;
  };
  mean_se([](const KlRow& r) { return r.kl; }, &s.mean_kl, &s.mean_kl_se);
  mean_se([](const KlRow& r) { return r.same_top ? 1.0 : 0.0; }, &s.same_top, &s.same_top_se);
  double ln_ref, ln_ref_se, ln_q, ln_q_se, dp2, unused;
  mean_se([](const KlRow& r) { return r.nll_ref; }, &ln_ref, &ln_ref_se);
  mean_se([](const KlRow& r) { return r.nll_q; }, &ln_q, &ln_q_se);
  mean_se([](const KlRow& r) { return r.nll_q - r.nll_ref; }, &s.ln_ppl_ratio, &s.ln_ppl_ratio_se);
  mean_se([](const KlRow& r) { return r.p_q - r.p_ref; }, &s.mean_dp, &unused);
  mean_se([](const KlRow& r) { return (r.p_q - r.p_ref) * (r.p_q - r.p_ref); }, &dp2, &unused);
  s.rms_dp = std::sqrt(dp2);
  s.ppl_ref = std::exp(ln_ref);
  s.ppl_ref_se = s.ppl_ref * ln_ref_se;
  s.ppl_q = std::exp(ln_q);
  s.ppl_q_se = s.ppl_q * ln_q_se;
  s.ppl_ratio = std::exp(s.ln_ppl_ratio);
  std::vector<double> kl;
  kl.reserve(rows.size());
  for (const KlRow& r : rows) kl.push_back(r.kl);
  std::sort(kl.begin(), kl.end());
  s.max_kl = kl.back();
  s.min_kl = kl.front();
  s.p999_kl = Percentile(kl, 0.999);
  s.p99_kl = Percentile(kl, 0.99);
  s.median_kl = Percentile(kl, 0.5);
  s.p10_kl = Percentile(kl, 0.10);
  return s;
}

namespace kl_internal {

// A sequence's step in the stream's own block range (chunk slot `slot` of the KV cache): input
// tokens [begin, end) of `tokens` as prompt rows; every row samples when `all_rows` (the
// logits of each come back), none otherwise.
inline ScheduledSeq ChunkSeq(const std::vector<int>& tokens, int begin, int end, int slot,
                             const KlOptions& o, bool all_rows) {
  ScheduledSeq s;
  s.request_id = slot + 1;
  s.token_ids.assign(tokens.begin() + begin, tokens.begin() + end);
  s.start_position = begin;
  s.num_prompt = o.context;  // every row is a prompt row (the CPU kernels' prompt path)
  s.is_prefill = true;
  s.sample = all_rows;
  s.num_draft = all_rows ? end - begin - 1 : 0;
  const int blocks_per_chunk = (o.context + o.block_size - 1) / o.block_size;
  const int needed = (end + o.block_size - 1) / o.block_size;
  for (int b = 0; b < needed; ++b) s.block_table.push_back(slot * blocks_per_chunk + b);
  return s;
}

inline StepPlan PlanOf(std::vector<ScheduledSeq> seqs) {
  StepPlan p;
  for (const ScheduledSeq& s : seqs) {
    (s.is_prefill ? p.num_prefill_tokens : p.num_decode_tokens) += s.num_new_tokens();
  }
  p.seqs = std::move(seqs);
  return p;
}

// A draw from softmax(logits) (temperature 1) with the uniform `u` in [0, 1), in double.
inline int Draw(const float* logits, int vocab, double u) {
  const double mx = *std::max_element(logits, logits + vocab);
  double total = 0;
  for (int i = 0; i < vocab; ++i) total += std::exp(double{logits[i]} - mx);
  double acc = 0;
  const double target = u * total;
  for (int i = 0; i < vocab; ++i) {
    acc += std::exp(double{logits[i]} - mx);
    if (acc > target) return i;
  }
  return static_cast<int>(std::max_element(logits, logits + vocab) - logits);
}

}  // namespace kl_internal

// `num_chunks` chunks of `o.context` tokens: BOS, then the reference model's own continuation
// drawn at temperature 1 (softmax in double, one uniform per (seed, chunk, position) from
// SplitMix64), decoded o.sample_batch chunks at a time. Deterministic for a given model, seed
// and runner (the batch-invariant kernels give a row the same logits at any batch).
inline absl::StatusOr<std::vector<std::vector<int>>> SampleChunks(
    ModelRunner& ref, int num_chunks, int bos, uint64_t seed, const KlOptions& o,
    const std::function<void(int done)>& progress = {}) {
  RETURN_IF_ERROR(CheckKlOptions(o));
  const int vocab = ref.model().vocab_size;
  std::vector<std::vector<int>> chunks(num_chunks);
  std::vector<float> logits;
  for (int c0 = 0; c0 < num_chunks; c0 += o.sample_batch) {
    const int n = std::min(o.sample_batch, num_chunks - c0);
    for (int i = 0; i < n; ++i) chunks[c0 + i] = {bos};
    for (int pos = 0; pos + 1 < o.context; ++pos) {
      std::vector<ScheduledSeq> seqs;
      for (int i = 0; i < n; ++i) {
        ScheduledSeq s = kl_internal::ChunkSeq(chunks[c0 + i], pos, pos + 1, i, o, true);
        s.num_prompt = 1;  // generated rows: the decode path, as served
        s.is_prefill = pos == 0;
        seqs.push_back(std::move(s));
      }
      ASSIGN_OR_RETURN(RunnerOutput out,
                       ref.ExecuteWithLogits(kl_internal::PlanOf(std::move(seqs)), &logits));
      for (int i = 0; i < n; ++i) {
        const uint64_t bits = SplitMix64(
            seed ^ SplitMix64((static_cast<uint64_t>(c0 + i) << 32) | static_cast<uint64_t>(pos)));
        const double u = static_cast<double>(bits >> 11) * 0x1.0p-53;
        chunks[c0 + i].push_back(kl_internal::Draw(&logits[size_t(i) * vocab], vocab, u));
      }
    }
    if (progress) progress(c0 + n);
  }
  return chunks;
}

// `tokens` cut into chunks of o.context tokens, at most max_chunks (0: all whole ones), the
// first token of each replaced by BOS (as llama-perplexity does for a model that adds BOS).
inline std::vector<std::vector<int>> ChunksFromTokens(const std::vector<int>& tokens, int bos,
                                                      int max_chunks, const KlOptions& o) {
  std::vector<std::vector<int>> chunks;
  for (size_t b = 0; b + o.context <= tokens.size(); b += o.context) {
    if (max_chunks > 0 && static_cast<int>(chunks.size()) == max_chunks) break;
    chunks.emplace_back(tokens.begin() + b, tokens.begin() + b + o.context);
    chunks.back()[0] = bos;
  }
  return chunks;
}

// Runs `ref` and `candidate` over every chunk with the same plans (the context rows in one
// step, then the scored rows o.rows_per_step at a time) and compares each scored row. Both
// runners must hold KlRunnerConfig(o) and the same model shape; `progress` is called after
// each chunk with the chunks done.
inline absl::StatusOr<std::vector<KlRow>> CompareRunners(
    ModelRunner& ref, ModelRunner& candidate, const std::vector<std::vector<int>>& chunks,
    const KlOptions& o, const std::function<void(int done)>& progress = {}) {
  RETURN_IF_ERROR(CheckKlOptions(o));
  const int vocab = ref.model().vocab_size;
  if (candidate.model().vocab_size != vocab) {
    return absl::InvalidArgumentError("the two runners' vocabularies differ");
  }
  std::vector<KlRow> rows;
  std::vector<float> lr, lq;
  for (size_t c = 0; c < chunks.size(); ++c) {
    const std::vector<int>& t = chunks[c];
    if (static_cast<int>(t.size()) != o.context) {
      return absl::InvalidArgumentError(
          absl::StrCat("chunk ", c, " holds ", t.size(), " tokens, not ", o.context));
    }
    for (int id : t) {
      if (id < 0 || id >= vocab) {
        return absl::InvalidArgumentError(
            absl::StrCat("chunk ", c, ": token ", id, " is outside the vocabulary of ", vocab));
      }
    }
    auto both = [&](int begin, int end, bool all_rows) -> absl::Status {
      const StepPlan plan =
          kl_internal::PlanOf({kl_internal::ChunkSeq(t, begin, end, 0, o, all_rows)});
      RETURN_IF_ERROR(ref.ExecuteWithLogits(plan, &lr).status());
      RETURN_IF_ERROR(candidate.ExecuteWithLogits(plan, &lq).status());
      return absl::OkStatus();
    };
    if (o.score_from > 0) RETURN_IF_ERROR(both(0, o.score_from, false));
    for (int b = o.score_from; b < o.context - 1; b += o.rows_per_step) {
      const int e = std::min(b + o.rows_per_step, o.context - 1);
      RETURN_IF_ERROR(both(b, e, true));
      for (int r = 0; r < e - b; ++r) {
        const size_t off = size_t(r) * vocab;
        rows.push_back(CompareRow(&lr[off], &lq[off], vocab, t[b + r + 1]));
      }
    }
    if (progress) progress(static_cast<int>(c) + 1);
  }
  return rows;
}

}  // namespace saturn::bench
