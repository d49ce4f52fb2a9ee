// saturn-bench-kl: the accuracy cost of quantized weights, as llama.cpp's
// `llama-perplexity --kl-divergence` reports it: the KL divergence of the next-token
// distributions of --model with --quantization q8_0|q4_0 (or --dtype bf16) weights against the
// same model with f32 weights and an f32 KV cache, over a fixed token stream of at least
// --positions scored positions; with it the 99th percentile and maximum KL, how often both pick
// the same most likely token ("same top p"), and each one's perplexity over the stream.
//
// Both models are built from the same loaded weights in this process, each on its own backend,
// and run the same teacher-forced steps (bench/kl_eval.h); every scored row's full-vocabulary
// logits are compared in double. The stream is --text FILE tokenized by the model's own
// tokenizer, or by default the f32 model's own continuation from BOS at temperature 1 with
// --seed (the presets' random weights have no text to read).
//
//   saturn-bench-kl --model=small --quantization=q8_0 --threads=2 --positions=4096 \
//       --json=kl_q8_0.json
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_format.h"
#include "bench/bench_util.h"
#include "bench/kl_eval.h"
#include "engine/engine_flags.h"
#include "engine/model/weights.h"
#include "engine/model_runner.h"
#include "engine/tokenizer/text_tokenizer.h"
#include "kernels/base/read_file.h"
#include "kernels/base/split_mix64.h"

// Besides the engine's flags (--model, --quantization, --dtype, --threads, ...:
// engine/engine_flags.h); the reference always has f32 weights and an f32 KV cache.
ABSL_FLAG(int, positions, 4096, "scored positions, at least (whole chunks are scored)");
ABSL_FLAG(int, context, 512, "tokens per chunk of the stream (llama-perplexity's -c)");
ABSL_FLAG(int, score_from, -1,
          "first scored row of each chunk; the rows before give context only (-1: context / 2, "
          "as llama-perplexity)");
ABSL_FLAG(std::string, text, "",
          "a text file tokenized by the model's tokenizer as the stream (empty: the f32 model's "
          "own continuation from BOS at temperature 1, seeded by --seed)");
ABSL_FLAG(uint64_t, seed, 42, "the sampled stream's seed");
ABSL_FLAG(int, rows_per_step, 128, "scored rows (full-vocabulary logits) per step");
ABSL_FLAG(int, sample_batch, 32, "chunks of the sampled stream decoded side by side");
ABSL_FLAG(std::string, json, "", "write results as JSON to this file");

namespace saturn {
namespace {

constexpr char kUsage[] =
    "saturn-bench-kl: KL divergence of quantized weights' next-token distributions against "
    "f32 over a fixed token stream, as llama-perplexity --kl-divergence (JSON)";

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

// A hash of the stream, so runs can say they scored the same tokens.
uint64_t StreamHash(const std::vector<std::vector<int>>& chunks) {
  uint64_t h = 0;
  for (const std::vector<int>& c : chunks) {
    for (int t : c) h = SplitMix64(h ^ static_cast<uint32_t>(t));
  }
  return h;
}

absl::StatusOr<std::vector<std::vector<int>>> TextChunks(const std::string& path,
                                                         const std::string& model, int bos,
                                                         int num_chunks,
                                                         const bench::KlOptions& o) {
  ASSIGN_OR_RETURN(std::unique_ptr<TextTokenizer> tok, LoadTextTokenizer(model, false));
  if (tok == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("--text: ", model, " has no text tokenizer; leave --text out"));
  }
  ASSIGN_OR_RETURN(const std::string text, ReadFileBounded(path, kMaxDataFileBytes));
  ASSIGN_OR_RETURN(const std::vector<int> ids, tok->Encode(text));
  std::vector<std::vector<int>> chunks = bench::ChunksFromTokens(ids, bos, num_chunks, o);
  if (static_cast<int>(chunks.size()) < num_chunks) {
    return absl::InvalidArgumentError(
        absl::StrCat("--text: ", path, " gives ", ids.size(), " tokens (", tok->kind(),
                     " tokenizer), ", chunks.size(), " chunks of ", o.context, "; ", num_chunks,
                     " are needed for --positions (lower it or --context)"));
  }
  return chunks;
}

int Fail(const absl::Status& s) {
  std::cerr << "saturn-bench-kl: " << s << "\n";
  return 1;
}

int Main() {
  EngineConfig cfg = EngineConfigFromFlags();
  const bool quantized = cfg.quantization == "q8_0" || cfg.quantization == "q4_0";
  if (!quantized && cfg.quantization != "none" && cfg.quantization != "auto") {
    return Fail(absl::InvalidArgumentError("--quantization: q8_0, q4_0 or none"));
  }
  const std::string cand_dtype = quantized ? cfg.quantization : cfg.dtype;
  bench::KlOptions o;
  o.context = absl::GetFlag(FLAGS_context);
  o.score_from =
      absl::GetFlag(FLAGS_score_from) >= 0 ? absl::GetFlag(FLAGS_score_from) : o.context / 2;
  o.rows_per_step = absl::GetFlag(FLAGS_rows_per_step);
  o.sample_batch = absl::GetFlag(FLAGS_sample_batch);
  const int positions = absl::GetFlag(FLAGS_positions);
  if (!bench::FlagInRange("positions", positions, 1, 1 << 24) ||
      !bench::FlagInRange("rows_per_step", o.rows_per_step, 1, 4096) ||
      !bench::FlagInRange("sample_batch", o.sample_batch, 1, 256)) {
    return 2;
  }
  if (absl::Status s = bench::CheckKlOptions(o); !s.ok()) return Fail(s);
  const int per_chunk = bench::ScoredPerChunk(o);
  const int num_chunks = (positions + per_chunk - 1) / per_chunk;

  const std::string text = absl::GetFlag(FLAGS_text);
  std::unique_ptr<Backend> ref_backend, cand_backend;
  std::unique_ptr<ModelRunner> ref, cand;
  ModelConfig model;
  {
    const auto t0 = std::chrono::steady_clock::now();
    absl::StatusOr<ModelWeights> w = LoadModel(cfg.model, cfg.weight_seed);
    if (!w.ok()) return Fail(w.status());
    model = w->config;
    if (o.context > model.max_position_embeddings) {
      return Fail(absl::InvalidArgumentError(absl::StrCat(
          "--context ", o.context, " exceeds the model's ", model.max_position_embeddings)));
    }
    auto rb = CreateBackend(cfg.backend, cfg.num_threads, "f32", "f32", cfg.batch_invariant,
                            cfg.cuda_kernels);
    if (!rb.ok()) return Fail(rb.status());
    auto cb = CreateBackend(cfg.backend, cfg.num_threads, cand_dtype, cfg.kv_cache_dtype,
                            cfg.batch_invariant, cfg.cuda_kernels);
    if (!cb.ok()) return Fail(cb.status());
    ref_backend = std::move(*rb);
    cand_backend = std::move(*cb);
    auto r = ModelRunner::Create(ref_backend.get(), *w, bench::KlRunnerConfig(o, text.empty()));
    if (!r.ok()) return Fail(r.status());
    auto c = ModelRunner::Create(cand_backend.get(), *w, bench::KlRunnerConfig(o, false));
    if (!c.ok()) return Fail(c.status());
    ref = std::move(*r);
    cand = std::move(*c);
    std::cerr << absl::StrFormat(
        "model %s: reference %s weights / %s KV, candidate %s weights / %s KV on %s (%.1f s)\n",
        cfg.model, DTypeName(ref_backend->weight_dtype()), DTypeName(ref_backend->kv_cache_dtype()),
        DTypeName(cand_backend->weight_dtype()), DTypeName(cand_backend->kv_cache_dtype()),
        cand_backend->device_name(), Seconds(t0));
  }

  const uint64_t seed = absl::GetFlag(FLAGS_seed);
  auto t0 = std::chrono::steady_clock::now();
  absl::StatusOr<std::vector<std::vector<int>>> chunks =
      text.empty() ? bench::SampleChunks(*ref, num_chunks, model.bos_token_id, seed, o,
                                         [&](int done) {
                                           std::cerr << absl::StrFormat(
                                               "\rstream: %d/%d chunks sampled (%.1f s)", done,
                                               num_chunks, Seconds(t0));
                                         })
                   : TextChunks(text, cfg.model, model.bos_token_id, num_chunks, o);
  if (text.empty()) std::cerr << "\n";
  if (!chunks.ok()) return Fail(chunks.status());
  const double stream_s = Seconds(t0);

  t0 = std::chrono::steady_clock::now();
  absl::StatusOr<std::vector<bench::KlRow>> rows =
      bench::CompareRunners(*ref, *cand, *chunks, o, [&](int done) {
        std::cerr << absl::StrFormat("\rcompare: %d/%d chunks (%.1f s)", done, num_chunks,
                                     Seconds(t0));
      });
  std::cerr << "\n";
  if (!rows.ok()) return Fail(rows.status());
  const double compare_s = Seconds(t0);
  const bench::KlSummary s = bench::Summarize(*rows);

  const std::string stream_desc =
      text.empty() ? absl::StrFormat("sampled: f32 model from BOS, temperature 1, seed %d", seed)
                   : absl::StrCat("text: ", text);
  std::printf("saturn-bench-kl: %s, %s vs f32, %lld positions (%d chunks of %d, rows %d-%d)\n",
              cfg.model.c_str(), DTypeName(cand_backend->weight_dtype()),
              static_cast<long long>(s.positions), num_chunks, o.context, o.score_from,
              o.context - 2);
  std::printf("stream      %s (hash %016llx)\n", stream_desc.c_str(),
              static_cast<unsigned long long>(StreamHash(*chunks)));
  std::printf("Mean PPL(Q)                 : %12.4f +/- %.4f\n", s.ppl_q, s.ppl_q_se);
  std::printf("Mean PPL(base)              : %12.4f +/- %.4f\n", s.ppl_ref, s.ppl_ref_se);
  std::printf("Mean ln(PPL(Q)/PPL(base))   : %12.6f +/- %.6f\n", s.ln_ppl_ratio, s.ln_ppl_ratio_se);
  std::printf("Mean PPL(Q)/PPL(base)       : %12.6f\n", s.ppl_ratio);
  std::printf("Mean    KLD                 : %12.6f +/- %.6f\n", s.mean_kl, s.mean_kl_se);
  std::printf("Maximum KLD                 : %12.6f\n", s.max_kl);
  std::printf("99.9%%   KLD                 : %12.6f\n", s.p999_kl);
  std::printf("99.0%%   KLD                 : %12.6f\n", s.p99_kl);
  std::printf("Median  KLD                 : %12.6f\n", s.median_kl);
  std::printf("10.0%%   KLD                 : %12.6f\n", s.p10_kl);
  std::printf("Minimum KLD                 : %12.6f\n", s.min_kl);
  std::printf("Mean    dp (next token)     : %11.4f %%\n", 100 * s.mean_dp);
  std::printf("RMS     dp (next token)     : %11.4f %%\n", 100 * s.rms_dp);
  std::printf("Same top p                  : %11.3f %% +/- %.3f %%\n", 100 * s.same_top,
              100 * s.same_top_se);
  std::printf("time        stream %.1f s, compare %.1f s\n", stream_s, compare_s);

  nlohmann::json out;
  out["model"] = cfg.model;
  out["backend"] = cand_backend->name();
  out["device"] = cand_backend->device_name();
  out["threads"] = cfg.num_threads;
  out["reference"] = {{"weight_dtype", DTypeName(ref_backend->weight_dtype())},
                      {"kv_cache_dtype", DTypeName(ref_backend->kv_cache_dtype())}};
  out["candidate"] = {{"weight_dtype", DTypeName(cand_backend->weight_dtype())},
                      {"kv_cache_dtype", DTypeName(cand_backend->kv_cache_dtype())}};
  out["stream"] = {{"kind", text.empty() ? "sampled" : "text"},
                   {"description", stream_desc},
                   {"seed", seed},
                   {"chunks", num_chunks},
                   {"context", o.context},
                   {"score_from", o.score_from},
                   {"hash", absl::StrFormat("%016x", StreamHash(*chunks))}};
  out["positions"] = s.positions;
  out["kl"] = {{"mean", s.mean_kl},  {"mean_se", s.mean_kl_se}, {"max", s.max_kl},
               {"p99_9", s.p999_kl}, {"p99", s.p99_kl},         {"median", s.median_kl},
               {"p10", s.p10_kl},    {"min", s.min_kl}};
  out["same_top"] = {{"fraction", s.same_top}, {"se", s.same_top_se}};
  out["ppl"] = {{"reference", s.ppl_ref},
                {"reference_se", s.ppl_ref_se},
                {"candidate", s.ppl_q},
                {"candidate_se", s.ppl_q_se},
                {"ratio", s.ppl_ratio},
                {"ln_ratio", s.ln_ppl_ratio},
                {"ln_ratio_se", s.ln_ppl_ratio_se}};
  out["delta_p"] = {{"mean", s.mean_dp}, {"rms", s.rms_dp}};
  out["seconds"] = {{"stream", stream_s}, {"compare", compare_s}};
  return bench::WriteJson(out, absl::GetFlag(FLAGS_json));
}

}  // namespace
}  // namespace saturn

int main(int argc, char** argv) {
  return saturn::bench::RunTool(argc, argv, saturn::kUsage, saturn::Main);
}
