// saturn-load: load generator for Saturn servers (flags -> LoadConfig -> RunSession ->
// table, JSON, CSV). The only file that defines flags, but for the security flags shared with
// saturn-diag (clients/common/security_flags.h). Exit codes: see clients/load/session.h.
//
//   saturn-load --target 127.0.0.1:50051 --concurrency 1,4,16 --num_requests 64
//   saturn-load --request_rate 2 --duration 60 --slo_ttft_ms 200 --json out.json
//   saturn-load --concurrency 8 --num_requests 200 --compare cuda_graphs
//   saturn-load --concurrency 32 --num_requests 32 --prefix_len 1024 --input_len 32
//   saturn-load --concurrency 1 --duration 10 --follow_plan
//   saturn-load --target host:50051 --tls_ca ca.pem --auth_token_file token
//   saturn-load --api openai --target http://127.0.0.1:8000 --concurrency 1,16   (vLLM, llama.cpp)
//   saturn-load --target 127.0.0.1:50051 --compare api --openai_target http://127.0.0.1:8080
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>
#include <utility>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "clients/common/security_flags.h"
#include "clients/load/config.h"
#include "clients/load/run_table.h"
#include "clients/load/session.h"
#include "clients/load/workload.h"
#include "kernels/base/flags_help.h"

ABSL_FLAG(std::string, api, "grpc",
          "grpc: Saturn's gRPC API (saturn.v1.Saturn/Generate); openai: any OpenAI-compatible "
          "server (vLLM, llama.cpp's server, TGI, Saturn's --http_port) through POST "
          "/v1/completions, streamed");
ABSL_FLAG(std::string, target, "127.0.0.1:50051",
          "Server(s), comma-separated, taking requests in turn (round-robin): host:port for "
          "--api grpc, http://host:port or https://host:port for --api openai");
ABSL_FLAG(std::string, model_name, "",
          "--api openai: the model to ask for (default: the first id GET /v1/models lists)");
ABSL_FLAG(std::string, diag_target, "",
          "--api openai against Saturn's HTTP front: Saturn's gRPC host:port, for the server's "
          "diagnosis of each phase and the model's limits (without it the diagnosis is skipped)");
ABSL_FLAG(std::string, openai_target, "",
          "--compare api: the OpenAI-compatible HTTP front(s) of the --target servers, "
          "http://host:port (saturn-server --http_port), comma-separated in --target's order");
ABSL_FLAG(std::string, concurrency, "1",
          "Closed loop: requests in flight; a comma-separated list runs a sweep");
ABSL_FLAG(std::string, request_rate, "",
          "Open loop: Poisson arrivals at this many req/s (inf: all at once); a list sweeps. "
          "Setting it selects the open loop");
ABSL_FLAG(int64_t, num_requests, -1,
          "Requests per phase (-1: 100 unless --duration is set; 0: no count bound)");
ABSL_FLAG(double, duration, 0, "Seconds of sending per phase (0: no time bound)");
ABSL_FLAG(double, min_measure_s, 10,
          "Each phase keeps sending past --num_requests / --duration until the load has run this "
          "many seconds after the warm-up, so that its figures are steady (0: stop at the bounds; "
          "at most 3x this past the bound; not for --request_rate inf)");
ABSL_FLAG(std::string, input_len, "32",
          "Prompt length: N, uniform:LOW:HIGH or normal:MEAN:SD (after --prefix_len's shared "
          "prefix)");
ABSL_FLAG(int, prefix_len, 0,
          "Synthetic prompts start with the same N random token ids (drawn once from --seed; "
          "vLLM's --random-prefix-len), then --input_len ids of their own: a prefix the server's "
          "prefix cache can share. Prefix + input + output are fitted to the model's context");
ABSL_FLAG(std::string, output_len, "32", "Output length (max_tokens), same forms as --input_len");
ABSL_FLAG(std::string, prompts, "",
          "JSONL file of prompts (prompt | prompt_token_ids | input_len, optional max_tokens)");
ABSL_FLAG(uint64_t, seed, 0, "Seed of the synthetic prompts, lengths, arrivals and sampling");
ABSL_FLAG(double, temperature, 0, "Sampling temperature (0: greedy)");
ABSL_FLAG(bool, ignore_eos, true,
          "Generate exactly max_tokens (ignore EOS); with --api openai sent as vLLM's ignore_eos "
          "field, which vLLM and Saturn take: a server without it may stop early at EOS");
ABSL_FLAG(int, warmup_requests, -1,
          "Requests sent before this many completions are not measured (-1: auto = the "
          "concurrency, or 10% of the requests in the open loop)");
ABSL_FLAG(double, slo_ttft_ms, 0, "Goodput SLO on time to first token (0: none)");
ABSL_FLAG(double, slo_tpot_ms, 0, "Goodput SLO on time per output token (0: none)");
ABSL_FLAG(std::string, compare, "",
          "cuda_graphs: run each phase with CUDA graphs off, then on, and compare; api: run each "
          "phase through --target's gRPC, then through --openai_target's HTTP front (same "
          "workload and seeds) and give the HTTP/gRPC ratios of TPOT p50 and output tok/s");
ABSL_FLAG(bool, follow_plan, false,
          "After each phase, follow the server's top plan action once: apply its engine options "
          "(UpdateEngineOptions) or its client concurrency, run the phase again, print predicted "
          "vs measured, then restore the options (an open-loop phase's \"raise client "
          "concurrency\" runs closed at the planned concurrency; --api openai needs "
          "--diag_target)");
ABSL_FLAG(double, connect_timeout, 10, "Seconds to wait for each target to be up and ready");
ABSL_FLAG(double, request_timeout, 600, "Deadline of each request, seconds");
ABSL_FLAG(int64_t, max_errors, 100, "Stop sending after this many failed requests (0: never)");
ABSL_FLAG(std::string, json, "", "Write every figure, the settings and each request here");
ABSL_FLAG(std::string, csv, "", "Write one row per phase here");
ABSL_FLAG(bool, progress, true, "Show progress on stderr (a bar on a terminal)");

namespace saturn::clients {
namespace {

std::atomic<bool> g_interrupted{false};

void OnSignal(int) { g_interrupted.store(true); }

int Usage(const std::string& what) {
  std::cerr << "saturn-load: " << what << std::endl;
  return 2;
}

// The run, once the flags are parsed.
int Run() {
  LoadConfig c;
  c.api = absl::GetFlag(FLAGS_api);
  auto targets = ParseTargetList("--target", absl::GetFlag(FLAGS_target));
  if (!targets.ok()) return Usage(std::string(targets.status().message()));
  c.target = *targets;
  c.model_name = absl::GetFlag(FLAGS_model_name);
  c.diag_target = absl::GetFlag(FLAGS_diag_target);
  const std::string openai_target = absl::GetFlag(FLAGS_openai_target);
  if (!openai_target.empty()) {
    auto urls = ParseTargetList("--openai_target", openai_target);
    if (!urls.ok()) return Usage(std::string(urls.status().message()));
    c.openai_target = *urls;
  }
  const std::string rate = absl::GetFlag(FLAGS_request_rate);
  const absl::CommandLineFlag& concurrency_flag = absl::GetFlagReflectionHandle(FLAGS_concurrency);
  if (!rate.empty() && concurrency_flag.CurrentValue() != concurrency_flag.DefaultValue()) {
    return Usage(
        "--concurrency: not with --request_rate (an open loop sends at the rate, however many "
        "requests are in flight; run the two as separate sweeps)");
  }
  if (!rate.empty()) {
    auto rates = ParseRateList("--request_rate", rate);
    if (!rates.ok()) return Usage(std::string(rates.status().message()));
    c.request_rate = *rates;
  }
  auto conc = ParseConcurrencyList("--concurrency", absl::GetFlag(FLAGS_concurrency));
  if (!conc.ok()) return Usage(std::string(conc.status().message()));
  c.concurrency = *conc;
  c.duration_s = absl::GetFlag(FLAGS_duration);
  c.min_measure_s = absl::GetFlag(FLAGS_min_measure_s);
  const int64_t n = absl::GetFlag(FLAGS_num_requests);
  if (n < -1) return Usage(absl::StrCat("--num_requests: must be >= 0 (or -1: auto), got ", n));
  c.num_requests = n >= 0 ? n : (c.duration_s > 0 ? 0 : 100);
  auto in = ParseLengthSpec("--input_len", absl::GetFlag(FLAGS_input_len));
  if (!in.ok()) return Usage(std::string(in.status().message()));
  auto out = ParseLengthSpec("--output_len", absl::GetFlag(FLAGS_output_len));
  if (!out.ok()) return Usage(std::string(out.status().message()));
  c.input_len = *in;
  c.prefix_len = absl::GetFlag(FLAGS_prefix_len);
  c.output_len = *out;
  c.prompts = absl::GetFlag(FLAGS_prompts);
  c.seed = absl::GetFlag(FLAGS_seed);
  c.temperature = absl::GetFlag(FLAGS_temperature);
  c.ignore_eos = absl::GetFlag(FLAGS_ignore_eos);
  c.warmup_requests = absl::GetFlag(FLAGS_warmup_requests);
  c.slo_ttft_ms = absl::GetFlag(FLAGS_slo_ttft_ms);
  c.slo_tpot_ms = absl::GetFlag(FLAGS_slo_tpot_ms);
  c.compare = absl::GetFlag(FLAGS_compare);
  c.follow_plan = absl::GetFlag(FLAGS_follow_plan);
  c.connect_timeout_s = absl::GetFlag(FLAGS_connect_timeout);
  c.request_timeout_s = absl::GetFlag(FLAGS_request_timeout);
  c.max_errors = absl::GetFlag(FLAGS_max_errors);
  c.json = absl::GetFlag(FLAGS_json);
  c.csv = absl::GetFlag(FLAGS_csv);
  c.progress = absl::GetFlag(FLAGS_progress);
  c.security = SecurityFlagsFromCommandLine();
  if (absl::Status s = c.Validate(); !s.ok()) return Usage(std::string(s.message()));
  if (!c.prompts.empty()) {
    if (absl::Status s = CheckJsonlWorkload(c.prompts); !s.ok()) {
      return Usage(absl::StrCat("--prompts: ", s.message()));
    }
  }
  // The output files can be opened before the run, not found unwritable after it.
  for (const auto& [flag, path] : {std::pair{"--json", c.json}, std::pair{"--csv", c.csv}}) {
    if (!path.empty() && !std::ofstream(path, std::ios::app)) {
      return Usage(absl::StrCat(flag, ": cannot write ", path));
    }
  }

  struct sigaction sa = {};
  sa.sa_handler = OnSignal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);

  ProgressPrinter printer(stderr, isatty(fileno(stderr)) != 0, c);
  SessionObserver obs;
  if (c.progress) {
    obs.phase_started = [&printer](const PhaseReport& p) { printer.PhaseStarted(p); };
    obs.progress = [&printer](const PhaseReport& p, const Progress& pr) { printer.Update(p, pr); };
    obs.phase_finished = [&printer](const PhaseReport& p) { printer.PhaseFinished(p); };
  }
  SessionResult res = RunSession(c, obs, &g_interrupted);

  // Output files are written whenever the run got as far as connecting, failed or not.
  int code = res.exit_code;
  if (res.connected) {
    std::cout << FormatTable(res) << std::flush;
    if (!c.json.empty()) {
      if (absl::Status s = WriteJson(res, c.json); !s.ok()) {
        std::cerr << "saturn-load: " << s.message() << std::endl;
        code = code == 0 ? 1 : code;
      }
    }
    if (!c.csv.empty()) {
      if (absl::Status s = WriteCsv(res, c.csv); !s.ok()) {
        std::cerr << "saturn-load: " << s.message() << std::endl;
        code = code == 0 ? 1 : code;
      }
    }
  }
  if (!res.error.empty()) std::cerr << "saturn-load: " << res.error << std::endl;
  return code;
}

}  // namespace
}  // namespace saturn::clients

int main(int argc, char** argv) {
  std::vector<char*> positional = saturn::ParseCommandLineWithHelp(
      argc, argv,
      "Load generator for Saturn (saturn.v1.Saturn/Generate) and any OpenAI-compatible server "
      "(--api openai)");
  if (positional.size() > 1)
    return saturn::clients::Usage(absl::StrCat("unexpected argument \"", positional[1], "\""));

  return saturn::clients::Run();
}
