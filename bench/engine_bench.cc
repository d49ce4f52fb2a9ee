// saturn-bench-engine: decode and prefill throughput of the engine against this machine's own
// ceilings. Measures, in the same run, GEMM peak and memory bandwidth
// (engine/measure/calibration.h), then decode tokens/s at each batch size, each step placed under
// its roofline bound (max(FLOPs / peak, bytes / bandwidth) from the cost model), graphs off
// and/or on; then prefill tokens/s of one request at each prompt length (the prefill steps'
// wall time, fastest of --prefill_repeats), with the attention share of that time.
// --rounds=N repeats calibration + decode rows N times: on a shared machine whose bandwidth
// drifts within minutes, each round's shares are against the ceilings measured just before it,
// and the summary gives each row's median and range over the rounds.
//
//   saturn-bench-engine --model=small --batches=1,8,32,64 --prefill_lens=128,512,1500 \
//       --dtype=bf16 --json=out.json
#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "bench/bench_util.h"
#include "engine/engine.h"
#include "engine/engine_flags.h"
#include "engine/measure/calibration.h"
#include "engine/measure/step_probe.h"
#include "engine/tp/tp_worker.h"
#include "kernels/base/status_macros.h"
#include "kernels/comm/tp_world.h"

// Besides the engine's flags (--model, --backend, ...: engine/engine_flags.h):
ABSL_FLAG(std::string, batches, "1,8,32,64", "comma-separated decode batch sizes");
ABSL_FLAG(int, prompt_len, 16, "prompt tokens per request");
ABSL_FLAG(int, decode_tokens, 32, "tokens generated per request");
ABSL_FLAG(std::string, graphs, "off", "off|on|both (CUDA graphs)");
ABSL_FLAG(std::string, json, "", "write results as JSON to this file");
ABSL_FLAG(std::string, prefill_lens, "", "comma-separated prompt lengths to time prefill at");
ABSL_FLAG(int, prefill_repeats, 3, "prefills timed per prompt length (fastest kept)");
ABSL_FLAG(bool, probe, false,
          "after each decode row, time the diagnostics' synthetic probe steps at that batch and "
          "the row's mean context, and print live / probe (how well the plan's curve stands "
          "for served steps)");
ABSL_FLAG(bool, client_threads, false,
          "drain each request's tokens on its own thread as they come (as served), rather than "
          "after the row");
ABSL_FLAG(int, rounds, 1,
          "decode rounds, each against ceilings measured just before it (medians summarised)");

namespace saturn {
namespace {

constexpr char kUsage[] =
    "saturn-bench-engine: decode tokens/s at several batch sizes against this machine's "
    "measured ceilings (JSON)";

struct Row {
  int round = 0;
  int batch = 0;
  bool graphs = false;
  double tokens_per_s = 0;
  double step_ms = 0;
  double bound_share = 0;      // roofline-bound time / measured time
  double bandwidth_share = 0;  // bytes-only bound / measured (MBU)
  double compute_share = 0;    // flops-only bound / measured (MFU)
  double bytes_per_step = 0;   // what the cost model says a step reads and writes
  // The row's tokens/s were its steps at the bandwidth ceiling (bytes only): batch 1's is the
  // decode bound. It counts what a step moves (weights, KV, activations), so with untied
  // embeddings the input table, of which a step reads a few rows, is not in it; with tied ones
  // (the presets) it equals the weight bytes plus a little KV and activation traffic.
  double bandwidth_bound_tokens_per_s = 0;
  // The same against the read-only weight stream alone (calibration's stream figure): the
  // ceiling the ceiling above takes the better of with a copy, whose bytes are half writes. A
  // decode step reads, so this is its read bandwidth bound.
  double read_bound_tokens_per_s = 0;
  int steps = 0;
  double ops_per_step = 0;  // ops issued (kernels launched or captured) per step, mean
  double graph_steps = 0;
  int per_op_timed_skipped = 0;  // steps left out because per-op events slowed them
  // Per op class (OpClass order): its timed device time / step wall, over the timed steps.
  std::array<double, static_cast<size_t>(OpClass::kCount)> class_share{};
  // Per GEMM shape (by the bytes it must move): ops per step and their achieved GB/s.
  std::map<int64_t, std::pair<double, double>> gemm_us_bytes;  // KB -> (us, bytes) summed
  int timed_steps = 0;
  double mean_context = 0;  // context per sequence attended, over the row's steps
  // --probe: the probe's steps at this batch and context (best and mean of its repeats).
  double probe_best_ms = 0, probe_mean_ms = 0;

  double read_share() const { return tokens_per_s / std::max(read_bound_tokens_per_s, 1e-9); }
  double max_share() const { return std::max({bound_share, bandwidth_share, compute_share}); }
};

absl::StatusOr<Row> RunBatch(Engine* engine, const Calibration& cal, int batch, bool graphs) {
  EngineOptions o = engine->options();
  o.max_num_seqs = batch;
  o.cuda_graphs = graphs;
  auto applied = engine->UpdateOptions(o);
  if (!applied.ok()) return applied.status();
  const double t0 = NowUs();
  std::vector<std::unique_ptr<RequestStream>> streams;
  for (int i = 0; i < batch; ++i) {
    const GenerateRequest r = bench::SyntheticRequest(i * 131, 17, absl::GetFlag(FLAGS_prompt_len),
                                                      absl::GetFlag(FLAGS_decode_tokens));
    auto s = RequestStream::Open(engine, r);
    if (!s.ok()) return s.status();
    streams.push_back(std::move(*s));
  }
  if (absl::GetFlag(FLAGS_client_threads)) {
    // One thread per request waiting on each token, as a server's stream handlers do.
    std::vector<TokenEvent> last(streams.size());
    std::vector<std::thread> clients;
    for (size_t i = 0; i < streams.size(); ++i) {
      clients.emplace_back([&, i] { last[i] = streams[i]->Drain(nullptr); });
    }
    for (std::thread& t : clients) t.join();
    for (const TokenEvent& e : last) {
      if (e.finish_reason == FinishReason::kError) return absl::InternalError(e.error);
    }
  } else {
    for (auto& s : streams) {
      TokenEvent last = s->Drain(nullptr);
      if (last.finish_reason == FinishReason::kError) return absl::InternalError(last.error);
    }
  }
  Row row;
  row.batch = batch;
  row.graphs = graphs;
  double wall = 0, bound = 0, bw = 0, fl = 0, tokens = 0, timed_wall = 0;
  std::array<double, static_cast<size_t>(OpClass::kCount)> class_us{};
  const bool per_op_cheap = engine->info().per_op_timing_is_cheap;
  for (const StepRecord& r : engine->steps().Since(t0)) {
    // Full-batch decode steps only: prefill and the ragged tail are not steady state. Steps
    // timed per op (every Nth eager step where that timing perturbs, as on CUDA) pay for
    // their events and are left out, so graphs-off rows are not slowed by instrumentation.
    if (r.num_prefill_tokens > 0 || r.num_decode_tokens != batch) continue;
    if (r.per_op_timed && !per_op_cheap) {
      ++row.per_op_timed_skipped;
      continue;
    }
    const double t = r.wall_us() * 1e-6;
    const double tf = r.total_flops() / cal.gemm_flops_per_s;
    const double tb = r.total_bytes() / cal.bandwidth_bytes_per_s;
    wall += t;
    bound += std::max(tf, tb);
    bw += tb;
    fl += tf;
    row.bytes_per_step += r.total_bytes();
    row.mean_context += double(r.context_tokens) / std::max(1, r.num_decode_tokens);
    tokens += r.num_decode_tokens;
    row.graph_steps += r.graph_replayed ? 1 : 0;
    row.ops_per_step += r.op_count;
    ++row.steps;
    if (r.per_op_timed) {
      timed_wall += r.wall_us();
      for (size_t c = 0; c < class_us.size(); ++c) class_us[c] += r.by_class[c].device_us;
      ++row.timed_steps;
      for (const OpRecord& op : r.ops) {
        if (ClassOf(op.kind) != OpClass::kGemm || op.device_begin_us < 0) continue;
        auto& [us, bytes] = row.gemm_us_bytes[static_cast<int64_t>(op.cost.bytes / 1024)];
        us += op.device_end_us - op.device_begin_us;
        bytes += op.cost.bytes;
      }
    }
  }
  if (row.steps == 0) return absl::InternalError("no full-batch decode step was recorded");
  row.tokens_per_s = tokens / wall;
  row.step_ms = wall / row.steps * 1e3;
  row.bound_share = bound / wall;
  row.bandwidth_share = bw / wall;
  row.compute_share = fl / wall;
  row.bytes_per_step /= row.steps;
  row.ops_per_step /= row.steps;
  row.mean_context /= row.steps;
  row.bandwidth_bound_tokens_per_s = batch * cal.bandwidth_bytes_per_s / row.bytes_per_step;
  row.read_bound_tokens_per_s = batch * cal.stream_bandwidth_bytes_per_s / row.bytes_per_step;
  for (size_t c = 0; c < class_us.size(); ++c) {
    row.class_share[c] = timed_wall > 0 ? class_us[c] / timed_wall : 0;
  }
  return row;
}

// The diagnostics' probe steps (engine/measure/step_probe.h) at the row's batch and mean context,
// right after the row: what the plan's curve would hold for this shape.
absl::Status ProbeRow(Engine* engine, Row* row) {
  StepProbeOptions po;
  po.max_batch = row->batch;
  po.max_prefill_tokens = 0;
  po.context = std::max(1, int(std::lround(row->mean_context)));
  po.repeats = 5;
  po.budget_ms = 60000;
  ASSIGN_OR_RETURN(StepProbe probe, engine->ProbeSteps(po));
  for (const ProbeSeries& s : probe.series) {
    if (s.prefill || s.rows != row->batch || s.wall_us.empty()) continue;
    double sum = 0;
    for (double us : s.wall_us) sum += us;
    row->probe_best_ms = *std::min_element(s.wall_us.begin(), s.wall_us.end()) * 1e-3;
    row->probe_mean_ms = sum / s.wall_us.size() * 1e-3;
  }
  if (row->probe_best_ms <= 0) return absl::InternalError("the probe did not time this batch");
  return absl::OkStatus();
}

struct PrefillRow {
  int prompt_len = 0;
  double tokens_per_s = 0;
  double prefill_ms = 0;       // wall time of the request's prefill steps
  double attention_share = 0;  // attention ops' device time / prefill wall
  double gemm_share = 0;       // GEMM ops' device time / prefill wall
  double roofline_share = 0;   // roofline-bound time / prefill wall
  int steps = 0;
};

// One request of `len` prompt tokens and one generated token, alone in the engine.
absl::StatusOr<PrefillRow> RunPrefill(Engine* engine, const Calibration& cal, int len, int rep) {
  EngineOptions o = engine->options();
  o.max_num_seqs = 1;
  o.cuda_graphs = false;
  auto applied = engine->UpdateOptions(o);
  if (!applied.ok()) return applied.status();
  const double t0 = NowUs();
  auto s = RequestStream::Open(engine, bench::SyntheticRequest(rep * 977 + len, 29, len, 1));
  if (!s.ok()) return s.status();
  TokenEvent last = (*s)->Drain(nullptr);
  if (last.finish_reason == FinishReason::kError) return absl::InternalError(last.error);
  PrefillRow row;
  row.prompt_len = len;
  double wall = 0, attn = 0, gemm = 0, bound = 0;
  // The step is recorded after its token events go out: wait (briefly) for its record.
  std::vector<StepRecord> steps = engine->steps().Since(t0);
  for (int i = 0;
       i < 1000 && std::none_of(steps.begin(), steps.end(),
                                [](const StepRecord& r) { return r.num_prefill_tokens > 0; });
       ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    steps = engine->steps().Since(t0);
  }
  for (const StepRecord& r : steps) {
    if (r.num_prefill_tokens == 0) continue;
    wall += r.wall_us() * 1e-6;
    attn += r.by_class[static_cast<size_t>(OpClass::kAttention)].device_us * 1e-6;
    gemm += r.by_class[static_cast<size_t>(OpClass::kGemm)].device_us * 1e-6;
    bound += std::max(r.total_flops() / cal.gemm_flops_per_s,
                      r.total_bytes() / cal.bandwidth_bytes_per_s);
    ++row.steps;
  }
  if (row.steps == 0) return absl::InternalError("no prefill step was recorded");
  row.tokens_per_s = len / wall;
  row.prefill_ms = wall * 1e3;
  row.attention_share = attn / wall;
  row.gemm_share = gemm / wall;
  row.roofline_share = bound / wall;
  return row;
}

// A share over 100 % means the row ran faster than the ceilings measured before it: the
// calibration read the machine slower than it then was (on a shared host its speed moves
// within minutes). Said where it shows, as the diagnostics report does (self_check.cc).
void NoteAboveCeiling(double share, const char* what) {
  if (share <= 1) return;
  std::printf(
      "       note: %s %.0f %% of the ceiling measured before it: the machine ran faster than "
      "while calibrating, so this share is suspect\n",
      what, 100 * share);
}

void PrintRow(const Row& row, const Calibration& cal) {
  std::printf("%-6d %-6s %12.1f %10.2f %12.1f %8.1f %8.1f  ", row.batch, row.graphs ? "on" : "off",
              row.tokens_per_s, row.step_ms, 100 * row.bound_share, 100 * row.bandwidth_share,
              100 * row.compute_share);
  for (double c : row.class_share) std::printf(" %5.1f", 100 * c);
  std::printf(
      "\n       %.1f MB and %.0f ops a step: %.1f tok/s at the bandwidth ceiling; at the "
      "read-stream's %.1f GB/s %.1f tok/s (%.1f %% of it reached)\n",
      row.bytes_per_step / 1e6, row.ops_per_step, row.bandwidth_bound_tokens_per_s,
      cal.stream_bandwidth_bytes_per_s / 1e9, row.read_bound_tokens_per_s, 100 * row.read_share());
  for (const auto& [kb, t] : row.gemm_us_bytes) {  // where the GEMM time goes
    const double ops = t.second / (std::max<int64_t>(kb, 1) * 1024.0);
    const double bytes_per_s = t.second / std::max(t.first * 1e-6, 1e-12);
    std::printf(
        "       gemm %7.2f MiB x %4.1f per step: %7.1f us each, %5.1f GB/s = %5.1f %% of bw\n",
        kb / 1024.0, ops / std::max(row.timed_steps, 1), t.first / std::max(ops, 1.0),
        bytes_per_s / 1e9, 100 * bytes_per_s / cal.bandwidth_bytes_per_s);
  }
  NoteAboveCeiling(row.max_share(), "this row ran at");
  if (row.probe_best_ms > 0) {
    std::printf(
        "       probe at batch %d, context %.0f: best %.2f ms, mean %.2f ms; live step / probe "
        "best %.3f, / probe mean %.3f\n",
        row.batch, row.mean_context, row.probe_best_ms, row.probe_mean_ms,
        row.step_ms / row.probe_best_ms, row.step_ms / row.probe_mean_ms);
  }
  std::fflush(stdout);
}

struct RoundStats {
  double median = 0, min = 0, max = 0;
};
RoundStats Stats(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return {n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]), v.front(), v.back()};
}

// Each (batch, graphs) row's values over the rounds: tokens/s, its roofline share and its
// share of the read-stream bound.
struct RowRounds {
  RoundStats tokens_per_s, roofline_share, read_share;
};
std::map<std::pair<int, bool>, RowRounds> SummariseRounds(const std::vector<Row>& rows) {
  std::map<std::pair<int, bool>, std::array<std::vector<double>, 3>> by_row;
  for (const Row& r : rows) {
    auto& v = by_row[{r.batch, r.graphs}];
    v[0].push_back(r.tokens_per_s);
    v[1].push_back(r.bound_share);
    v[2].push_back(r.read_share());
  }
  std::map<std::pair<int, bool>, RowRounds> out;
  for (const auto& [key, v] : by_row) out[key] = {Stats(v[0]), Stats(v[1]), Stats(v[2])};
  return out;
}

void PrintRoundSummary(const std::vector<Row>& rows) {
  std::printf("over the rounds (median [min, max]); each round against its own ceilings\n");
  std::printf("%-6s %-6s %28s %28s %28s\n", "batch", "graphs", "tokens/s", "roofline %",
              "% of read-stream bound");
  for (const auto& [key, st] : SummariseRounds(rows)) {
    std::printf("%-6d %-6s %10.1f [%6.1f, %6.1f] %10.1f [%6.1f, %6.1f] %10.1f [%6.1f, %6.1f]\n",
                key.first, key.second ? "on" : "off", st.tokens_per_s.median, st.tokens_per_s.min,
                st.tokens_per_s.max, 100 * st.roofline_share.median, 100 * st.roofline_share.min,
                100 * st.roofline_share.max, 100 * st.read_share.median, 100 * st.read_share.min,
                100 * st.read_share.max);
  }
  std::fflush(stdout);
}

// Token counts a flag may ask for: past any model's context.
constexpr int kMaxFlagTokens = 1 << 20;

// Checked before anything loads: the flag's name, the value and the range, exit 2.
int Main() {
  std::vector<int> batches;
  for (absl::string_view s : absl::StrSplit(absl::GetFlag(FLAGS_batches), ',')) {
    int b = 0;
    if (!absl::SimpleAtoi(s, &b) || b < 1 || b > kMaxNumSeqsLimit) {
      std::cerr << "--batches: \"" << s << "\" is not an integer in [1, " << kMaxNumSeqsLimit
                << "]\n";
      return 2;
    }
    batches.push_back(b);
  }
  const int prompt_len = absl::GetFlag(FLAGS_prompt_len);
  if (!bench::FlagInRange("prompt_len", prompt_len, 1, kMaxFlagTokens) ||
      !bench::FlagInRange("decode_tokens", absl::GetFlag(FLAGS_decode_tokens), 1, kMaxFlagTokens) ||
      !bench::FlagInRange("prefill_repeats", absl::GetFlag(FLAGS_prefill_repeats), 1, 100)) {
    return 2;
  }
  const std::string graphs_flag = absl::GetFlag(FLAGS_graphs);
  std::vector<bool> graph_modes;
  if (graphs_flag == "off" || graphs_flag == "both") graph_modes.push_back(false);
  if (graphs_flag == "on" || graphs_flag == "both") graph_modes.push_back(true);
  if (graph_modes.empty()) {
    std::cerr << "--graphs: must be off, on or both\n";
    return 2;
  }
  std::vector<int> prefill_lens;
  const std::string prefill_flag = absl::GetFlag(FLAGS_prefill_lens);
  for (absl::string_view s : absl::StrSplit(prefill_flag, ',')) {
    if (prefill_flag.empty()) break;  // none asked for
    int len = 0;
    if (!absl::SimpleAtoi(s, &len) || len < 1 || len > kMaxFlagTokens) {
      std::cerr << "--prefill_lens: \"" << s << "\" is not an integer in [1, " << kMaxFlagTokens
                << "]\n";
      return 2;
    }
    prefill_lens.push_back(len);
  }
  int max_prefill = 0;
  for (int len : prefill_lens) max_prefill = std::max(max_prefill, len);
  EngineConfig cfg = EngineConfigFromFlags();
  // --tensor_parallel N: ranks above 0 serve rank 0's steps (engine/tp/tp_worker.h) and print
  // nothing; rank 0 measures as usual, the all-reduces in the comm class.
  std::unique_ptr<Communicator> tp_world;
  TpExitOnLeave tp_exit;
  if (cfg.tensor_parallel > 1) {
    auto world = JoinTensorParallel(cfg.tensor_parallel, "saturn-bench-engine");
    if (!world.ok()) {
      std::cerr << world.status().message() << "\n";
      return 2;
    }
    tp_world = std::move(*world);
    if (tp_world->rank() > 0) {
      const absl::Status s = RunTpWorker(tp_world.get(), "saturn-bench-engine worker: ");
      if (s.ok()) return 0;
      // Out of step with rank 0 (which may wait in a collective for it): end every rank.
      std::cerr << "saturn-bench-engine worker: " << s.message() << std::endl;
      tp_world->Abort(1);
    }
    tp_exit.comm = tp_world.get();
    cfg.tp_comm = tp_world.get();
  }
  int max_batch = 1;
  for (int b : batches) max_batch = std::max(max_batch, b);
  cfg.max_num_seqs_limit = max_batch;
  if (int64_t{max_batch} * prompt_len > kMaxNumBatchedTokensLimit) {
    std::cerr << "--batches x --prompt_len: " << int64_t{max_batch} * prompt_len
              << " prompt tokens at once exceed the engine's limit of " << kMaxNumBatchedTokensLimit
              << "\n";
    return 2;
  }
  cfg.max_num_batched_tokens_limit = std::max({2048, max_batch * prompt_len, max_prefill});
  cfg.options.max_num_seqs = max_batch;
  cfg.options.max_num_batched_tokens = cfg.max_num_batched_tokens_limit;
  cfg.max_model_len = std::max(absl::GetFlag(FLAGS_prompt_len) + absl::GetFlag(FLAGS_decode_tokens),
                               max_prefill + 1) +
                      16;
  cfg.kv_cache_bytes = 0;
  std::cerr << "loading " << cfg.model << " ...\n";
  auto engine = Engine::Create(cfg);
  if (!engine.ok()) {
    std::cerr << "engine: " << engine.status() << "\n";
    return 1;
  }
  const EngineInfo info = (*engine)->info();
  const size_t weight_bytes = info.weight_bytes;
  const int rounds = absl::GetFlag(FLAGS_rounds);
  if (rounds < 1 || rounds > 100) {
    std::cerr << "--rounds: must be in [1, 100], got " << rounds << "\n";
    return 2;
  }
  absl::StatusOr<Calibration> cal;
  std::vector<Row> rows;
  std::vector<double> round_bandwidth;
  for (int round = 0; round < rounds; ++round) {
    std::cerr << "calibrating " << info.device_name << " (round " << round + 1 << " of " << rounds
              << ") ...\n";
    cal = (*engine)->Calibrate(ModelCalibrationOptions(**engine));
    if (!cal.ok()) {
      std::cerr << "calibration: " << cal.status() << "\n";
      return 1;
    }
    round_bandwidth.push_back(cal->bandwidth_bytes_per_s);
    if (rounds > 1) std::printf("round %d of %d\n", round + 1, rounds);
    std::printf("device %s | GEMM peak %.1f GFLOP/s | bandwidth %.1f GB/s | dispatch %.2f us/op\n",
                cal->device.c_str(), cal->gemm_flops_per_s / 1e9, cal->bandwidth_bytes_per_s / 1e9,
                cal->op_dispatch_us);
    std::printf("weights %s, %.1f MB; KV cache %s\n", DTypeName(info.weight_dtype),
                weight_bytes / 1e6, DTypeName(info.kv.dtype));
    std::printf("%-6s %-6s %12s %10s %12s %8s %8s   %s\n", "batch", "graphs", "tokens/s", "step ms",
                "roofline %", "MBU %", "MFU %", "% of step wall: gemm attn norm elem sample comm");
    for (bool g : graph_modes) {
      for (int b : batches) {
        auto row = RunBatch(engine->get(), *cal, b, g);
        if (!row.ok()) {
          std::cerr << "batch " << b << (g ? " graphs on" : "") << ": " << row.status() << "\n";
          return 1;
        }
        row->round = round;
        if (absl::GetFlag(FLAGS_probe)) {
          if (absl::Status st = ProbeRow(engine->get(), &*row); !st.ok()) {
            std::cerr << "probe at batch " << b << ": " << st << "\n";
            return 1;
          }
        }
        PrintRow(*row, *cal);
        rows.push_back(*row);
      }
    }
  }
  if (rounds > 1) PrintRoundSummary(rows);
  std::vector<PrefillRow> prefills;
  if (!prefill_lens.empty()) {
    std::printf("%-8s %12s %12s %8s %8s %12s\n", "prompt", "prefill t/s", "prefill ms", "attn %",
                "gemm %", "roofline %");
  }
  for (int len : prefill_lens) {
    PrefillRow best;
    for (int rep = 0; rep < absl::GetFlag(FLAGS_prefill_repeats); ++rep) {
      auto row = RunPrefill(engine->get(), *cal, len, rep);
      if (!row.ok()) {
        std::cerr << "prefill " << len << ": " << row.status() << "\n";
        return 1;
      }
      if (row->tokens_per_s > best.tokens_per_s) best = *row;
    }
    std::printf("%-8d %12.1f %12.1f %8.1f %8.1f %12.1f\n", len, best.tokens_per_s, best.prefill_ms,
                100 * best.attention_share, 100 * best.gemm_share, 100 * best.roofline_share);
    NoteAboveCeiling(best.roofline_share, "this prefill ran at");
    std::fflush(stdout);
    prefills.push_back(best);
  }
  // Batch 1 of the same round, graphs off: what each row's speed-up is against.
  const auto batch1_of = [&](int round) -> const Row* {
    for (const Row& r : rows) {
      if (r.round == round && r.batch == 1 && !r.graphs) return &r;
    }
    return nullptr;
  };
  // Which GEMM kernel ran at each batch (the CPU's planner measured them during the runs).
  const std::string kernel_plan = (*engine)->KernelPlan();
  if (!kernel_plan.empty()) std::printf("GEMM kernels chosen: %s\n", kernel_plan.c_str());
  nlohmann::json out;
  out["model"] = cfg.model;
  out["kernel_plan"] = kernel_plan;
  out["backend"] = info.backend;
  out["device"] = info.device_name;
  out["weight_dtype"] = DTypeName(info.weight_dtype);
  out["kv_cache_dtype"] = DTypeName(info.kv.dtype);
  out["weight_bytes"] = weight_bytes;
  if (const Row* b1 = batch1_of(rounds - 1)) {
    out["decode_bound_tokens_per_s_batch1"] = b1->bandwidth_bound_tokens_per_s;
  }
  for (const PrefillRow& p : prefills) {
    out["prefill"].push_back({{"prompt_len", p.prompt_len},
                              {"tokens_per_s", p.tokens_per_s},
                              {"prefill_ms", p.prefill_ms},
                              {"attention_share", p.attention_share},
                              {"gemm_share", p.gemm_share},
                              {"roofline_share", p.roofline_share},
                              {"above_ceiling", p.roofline_share > 1},
                              {"steps", p.steps}});
  }
  out["calibration"] = nlohmann::json::parse(CalibrationToJson(*cal));  // the last round's
  out["rounds"] = rounds;
  out["round_bandwidth_bytes_per_s"] = round_bandwidth;
  for (const auto& [key, st] : SummariseRounds(rows)) {
    const auto stats = [](const RoundStats& v) {
      return nlohmann::json{{"median", v.median}, {"min", v.min}, {"max", v.max}};
    };
    out["summary"].push_back({{"batch", key.first},
                              {"graphs", key.second},
                              {"tokens_per_s", stats(st.tokens_per_s)},
                              {"roofline_share", stats(st.roofline_share)},
                              {"read_bound_share", stats(st.read_share)}});
  }
  for (const Row& r : rows) {
    nlohmann::json j = {{"round", r.round},
                        {"batch", r.batch},
                        {"graphs", r.graphs},
                        {"tokens_per_s", r.tokens_per_s},
                        {"step_ms", r.step_ms},
                        {"roofline_share", r.bound_share},
                        {"above_ceiling", r.max_share() > 1},
                        {"mbu", r.bandwidth_share},
                        {"mfu", r.compute_share},
                        {"bytes_per_step", r.bytes_per_step},
                        {"bandwidth_bound_tokens_per_s", r.bandwidth_bound_tokens_per_s},
                        {"read_bound_tokens_per_s", r.read_bound_tokens_per_s},
                        {"read_bound_share", r.read_share()},
                        {"steps", r.steps},
                        {"ops_per_step", r.ops_per_step},
                        {"graph_steps", r.graph_steps},
                        {"per_op_timed_skipped", r.per_op_timed_skipped},
                        {"mean_context", r.mean_context}};
    if (r.probe_best_ms > 0) {
      j["probe_best_step_ms"] = r.probe_best_ms;
      j["probe_mean_step_ms"] = r.probe_mean_ms;
    }
    for (size_t c = 0; c < r.class_share.size(); ++c) {
      j["class_share"][OpClassName(static_cast<OpClass>(c))] = r.class_share[c];
    }
    if (const Row* b1 = batch1_of(r.round)) {
      j["speedup_vs_batch1"] = r.tokens_per_s / b1->tokens_per_s;
    }
    out["rows"].push_back(j);
  }
  for (const Row& r : rows) {
    const Row* b1 = batch1_of(r.round);
    if (b1 != nullptr && !r.graphs && r.batch != 1) {
      std::printf("batch %d / batch 1 throughput: %.2fx%s\n", r.batch,
                  r.tokens_per_s / b1->tokens_per_s,
                  rounds > 1 ? absl::StrFormat(" (round %d)", r.round + 1).c_str() : "");
    }
  }
  return bench::WriteJson(out, absl::GetFlag(FLAGS_json));
}

}  // namespace
}  // namespace saturn

int main(int argc, char** argv) {
  return saturn::bench::RunTool(argc, argv, saturn::kUsage, saturn::Main);
}
