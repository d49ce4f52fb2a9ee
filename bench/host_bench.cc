// saturn-bench-host: the engine's host path per step, on the null backend (every op issued and
// recorded as usual, none run: kernels/null_backend.h), so a step takes only the host's time.
// A GPU step shorter than this leaves the device waiting for the host. For each batch size,
// `batch` requests decode together; the decode steps where all of them ran give the host µs
// per step (wall time plus the loop's gap before the next step), split into the recorded
// phases: schedule, prepare (inputs packed and uploaded), issue (op calls), postprocess
// (scheduler update, token events), gap. Token events go to a callback that only counts them,
// so a server's stream writes are not in these figures.
//
// With --async_scheduling=on the engine runs its overlapped loop: schedule (of the next step),
// postprocess (of the previous one) and the gap after it (freeing that step's plan, the loop's
// turn) then run while a GPU would still be running a step, so "exposed" (host us less those
// three) is what a device step longer than them waits for; with it off, every phase is.
//
//   saturn-bench-host --model=small --batches=1,64,256 --decode_tokens=64 --json=host.json
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "bench/bench_util.h"
#include "engine/engine.h"

// Of the engine's flags (engine/engine_flags.h) only --model applies to the null backend, which
// takes no backend choice, threads, dtypes or kernels: this tool defines --model itself and
// links none of the others.
ABSL_FLAG(std::string, model, "small", "preset (tiny|small|1b) or checkpoint directory");
ABSL_FLAG(std::string, batches, "1,64,256", "comma-separated decode batch sizes");
ABSL_FLAG(int, prompt_len, 16, "prompt tokens per request");
ABSL_FLAG(int, decode_tokens, 64, "tokens generated per request");
ABSL_FLAG(std::string, json, "", "write results as JSON to this file");
ABSL_FLAG(std::string, async_scheduling, "off",
          "on | off: the engine's overlapped loop (EngineConfig::async_scheduling)");

namespace saturn {
namespace {

constexpr char kUsage[] = "Host microseconds per engine step on the null backend";

struct Row {
  int batch = 0;
  int steps = 0;
  double host_us = 0, host_p50_us = 0;  // per step: wall + gap to the next step
  double schedule_us = 0, prepare_us = 0, issue_us = 0, postprocess_us = 0, gap_us = 0;
  double other_us = 0;    // wall time outside the four phases (sampling's read-back, records)
  double exposed_us = 0;  // what a longer device step waits for (overlapped loop: less
                          // schedule, postprocess and gap)
  int ops_per_step = 0;
};

// Runs `batch` requests to the end; the decode steps that carried all of them.
absl::StatusOr<Row> RunBatch(Engine* engine, int batch, int prompt_len, int decode_tokens,
                             bool overlapped) {
  std::mutex mu;
  std::condition_variable cv;
  int finished = 0;
  const double begin = NowUs();
  for (int i = 0; i < batch; ++i) {
    absl::StatusOr<int64_t> id =
        engine->Submit(bench::SyntheticRequest(i * 7919, 31, prompt_len, decode_tokens),
                       [&](const TokenEvent& ev) {
                         if (!ev.final) return;
                         std::lock_guard<std::mutex> lock(mu);
                         ++finished;
                         cv.notify_all();
                       });
    if (!id.ok()) return id.status();
  }
  {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return finished == batch; });
  }
  std::vector<StepRecord> steps = bench::StepsIn(*engine, begin, NowUs());
  Row row;
  row.batch = batch;
  std::vector<double> host;
  for (size_t i = 0; i + 1 < steps.size(); ++i) {
    const StepRecord& r = steps[i];
    if (r.num_prefill_tokens > 0 || r.num_decode_tokens != batch) continue;
    const double gap = std::max(0.0, steps[i + 1].start_us - r.end_us);
    host.push_back(r.wall_us() + gap);
    row.schedule_us += r.schedule_us;
    row.prepare_us += r.prepare_us;
    row.issue_us += r.issue_us;
    row.postprocess_us += r.postprocess_us;
    row.gap_us += gap;
    row.ops_per_step = r.op_count;
  }
  if (host.empty()) return absl::InternalError("no decode step carried the whole batch");
  row.steps = static_cast<int>(host.size());
  const double n = row.steps;
  for (double* f :
       {&row.schedule_us, &row.prepare_us, &row.issue_us, &row.postprocess_us, &row.gap_us}) {
    *f /= n;
  }
  for (double h : host) row.host_us += h / n;
  std::sort(host.begin(), host.end());
  row.host_p50_us = host[host.size() / 2];
  row.other_us = std::max(0.0, row.host_us - row.schedule_us - row.prepare_us - row.issue_us -
                                   row.postprocess_us - row.gap_us);
  row.exposed_us =
      overlapped ? row.host_us - row.schedule_us - row.postprocess_us - row.gap_us : row.host_us;
  return row;
}

int Main() {
  std::vector<int> batches;
  for (absl::string_view s : absl::StrSplit(absl::GetFlag(FLAGS_batches), ',')) {
    int b = 0;
    if (!absl::SimpleAtoi(s, &b) || b < 1 || b > 4096) {
      std::fprintf(stderr, "--batches: each must be an integer in [1, 4096], got \"%s\"\n",
                   std::string(s).c_str());
      return 2;
    }
    batches.push_back(b);
  }
  const int prompt_len = absl::GetFlag(FLAGS_prompt_len);
  const int decode_tokens = absl::GetFlag(FLAGS_decode_tokens);
  if (!bench::FlagInRange("prompt_len", prompt_len, 1, 1 << 20) ||
      !bench::FlagInRange("decode_tokens", decode_tokens, 2, 1 << 20)) {
    return 2;
  }
  const int64_t most_tokens =
      int64_t{*std::max_element(batches.begin(), batches.end())} * prompt_len;
  if (most_tokens > kMaxNumBatchedTokensLimit) {
    std::fprintf(stderr,
                 "--batches, --prompt_len: the largest batch's prompts hold %lld tokens, over "
                 "the engine's limit of %d in one step\n",
                 static_cast<long long>(most_tokens), kMaxNumBatchedTokensLimit);
    return 2;
  }
  EngineConfig config;
  config.model = absl::GetFlag(FLAGS_model);
  config.backend = "null";
  const int most = *std::max_element(batches.begin(), batches.end());
  config.max_num_seqs_limit = std::max(config.max_num_seqs_limit, most);
  config.options.max_num_seqs = most;
  config.max_num_batched_tokens_limit =
      std::max(config.max_num_batched_tokens_limit, most * prompt_len);
  config.options.max_num_batched_tokens = std::max(2048, most * prompt_len);
  config.max_model_len = std::max(512, prompt_len + decode_tokens + 1);
  config.max_queued_requests = 0;
  config.async_scheduling = absl::GetFlag(FLAGS_async_scheduling);
  if (config.async_scheduling != "on" && config.async_scheduling != "off") {
    std::fprintf(stderr, "--async_scheduling: must be on or off, got \"%s\"\n",
                 config.async_scheduling.c_str());
    return 2;
  }
  const bool overlapped = config.async_scheduling == "on";
  absl::StatusOr<std::unique_ptr<Engine>> engine = Engine::Create(config);
  if (!engine.ok()) {
    std::fprintf(stderr, "cannot start the engine: %s\n", engine.status().ToString().c_str());
    return 1;
  }
  std::printf("host path per decode step, null backend (ops issued, none run), model %s, %s loop\n",
              config.model.c_str(), overlapped ? "overlapped" : "plain");
  std::printf("%6s %6s %9s %9s %9s %9s %9s %9s %9s %9s %9s %5s\n", "batch", "steps", "host us",
              "p50", "schedule", "prepare", "issue", "postproc", "gap", "other", "exposed", "ops");
  nlohmann::json rows = nlohmann::json::array();
  for (int b : batches) {
    absl::StatusOr<Row> r = RunBatch(engine->get(), b, prompt_len, decode_tokens, overlapped);
    if (!r.ok()) {
      std::fprintf(stderr, "batch %d: %s\n", b, r.status().ToString().c_str());
      return 1;
    }
    std::printf("%6d %6d %9.1f %9.1f %9.1f %9.1f %9.1f %9.1f %9.1f %9.1f %9.1f %5d\n", r->batch,
                r->steps, r->host_us, r->host_p50_us, r->schedule_us, r->prepare_us, r->issue_us,
                r->postprocess_us, r->gap_us, r->other_us, r->exposed_us, r->ops_per_step);
    rows.push_back({{"batch", r->batch},
                    {"steps", r->steps},
                    {"host_us_per_step", r->host_us},
                    {"host_us_per_step_p50", r->host_p50_us},
                    {"schedule_us", r->schedule_us},
                    {"prepare_us", r->prepare_us},
                    {"issue_us", r->issue_us},
                    {"postprocess_us", r->postprocess_us},
                    {"gap_us", r->gap_us},
                    {"other_us", r->other_us},
                    {"exposed_us_per_step", r->exposed_us},
                    {"ops_per_step", r->ops_per_step}});
  }
  (*engine)->Shutdown();
  return bench::WriteJson({{"tool", "saturn-bench-host"},
                           {"model", config.model},
                           {"prompt_len", prompt_len},
                           {"decode_tokens", decode_tokens},
                           {"async_scheduling", overlapped},
                           {"rows", rows}},
                          absl::GetFlag(FLAGS_json));
}

}  // namespace
}  // namespace saturn

int main(int argc, char** argv) {
  return saturn::bench::RunTool(argc, argv, saturn::kUsage, saturn::Main);
}
