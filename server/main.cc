// saturn-server: flags -> ServerConfig -> ServerApp; waits for SIGINT/SIGTERM, then shuts
// down gracefully and exits 0. The only file that defines flags.
#include <pthread.h>
#include <signal.h>

#include <iostream>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "engine/model_config.h"
#include "server/server_app.h"

ABSL_FLAG(std::string, listen, "127.0.0.1:50051", "Address to listen on: host:port or unix:path");
ABSL_FLAG(std::string, model, "small",
          "Built-in preset (tiny, small, 1b) or a Hugging Face Llama checkpoint directory");
ABSL_FLAG(std::string, backend, "auto", "auto | cpu | cuda");
ABSL_FLAG(int, threads, 0, "CPU backend threads (0: all cores)");
ABSL_FLAG(int, max_num_seqs, 64, "Most sequences per engine step");
ABSL_FLAG(int, max_num_batched_tokens, 2048, "Most tokens per engine step");
ABSL_FLAG(int, max_num_seqs_limit, 0,
          "Largest max_num_seqs UpdateEngineOptions may set (0: max(256, --max_num_seqs))");
ABSL_FLAG(int, max_num_batched_tokens_limit, 0,
          "Largest max_num_batched_tokens UpdateEngineOptions may set (0: max(8192, "
          "--max_num_batched_tokens))");
ABSL_FLAG(int, max_model_len, 0, "Longest sequence (0: the model's context, at most 4096)");
ABSL_FLAG(int, kv_cache_mb, 0,
          "KV cache size in MiB (0: enough for the sequence limit at full length, capped at "
          "1/4 of device memory)");
ABSL_FLAG(bool, cuda_graphs, false, "Replay CUDA graphs for decode steps (CUDA backend only)");
ABSL_FLAG(int, max_queued_requests, 1024,
          "Waiting requests beyond which Generate returns RESOURCE_EXHAUSTED (0: unbounded)");
ABSL_FLAG(absl::Duration, shutdown_grace, absl::Seconds(10),
          "On SIGINT/SIGTERM, how long in-flight streams may run before ending with UNAVAILABLE");
ABSL_FLAG(uint64_t, seed, 1234, "Seed of the built-in presets' random weights");
ABSL_FLAG(std::string, calibration, "measure",
          "measure: measure the device's GEMM peak, bandwidth and op dispatch cost at start; "
          "quick: the same with shorter trials and smaller buffers (tests); "
          "file: load them from --calibration_file");
ABSL_FLAG(std::string, calibration_file, "",
          "Calibration JSON to load with --calibration=file (written by --save_calibration)");
ABSL_FLAG(std::string, save_calibration, "", "Write the calibration in force to this JSON file");
ABSL_FLAG(int, metrics_port, 0,
          "Serve Prometheus metrics at http://HOST:PORT/metrics, HOST being --listen's host "
          "(0: off; -1: any free port, logged)");
ABSL_FLAG(double, metrics_window_seconds, 10,
          "Window of the saturn: diagnostics gauges (bottleneck class, MFU, MBU, busy)");

namespace {

int Fail(const std::string& what) {
  std::cerr << "saturn-server: " << what << std::endl;
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("Saturn LLM inference server (gRPC saturn.v1.Saturn)");
  absl::ParseCommandLine(argc, argv);

  // Block the shutdown signals before any thread starts so that every thread inherits the
  // mask and only sigwait below sees them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  saturn::ServerConfig config;
  config.listen = absl::GetFlag(FLAGS_listen);
  config.engine.model = absl::GetFlag(FLAGS_model);
  config.engine.backend = absl::GetFlag(FLAGS_backend);
  config.engine.num_threads = absl::GetFlag(FLAGS_threads);
  config.engine.max_model_len = absl::GetFlag(FLAGS_max_model_len);
  config.engine.max_queued_requests = absl::GetFlag(FLAGS_max_queued_requests);
  config.engine.weight_seed = absl::GetFlag(FLAGS_seed);
  config.shutdown_grace = absl::GetFlag(FLAGS_shutdown_grace);
  config.calibration = absl::GetFlag(FLAGS_calibration);
  config.calibration_file = absl::GetFlag(FLAGS_calibration_file);
  config.save_calibration = absl::GetFlag(FLAGS_save_calibration);
  config.metrics_port = absl::GetFlag(FLAGS_metrics_port);
  config.metrics_window_seconds = absl::GetFlag(FLAGS_metrics_window_seconds);
  const int kv_cache_mb = absl::GetFlag(FLAGS_kv_cache_mb);
  if (kv_cache_mb < 0) {
    return Fail(absl::StrCat("--kv_cache_mb: must be >= 0 (0: automatic), got ", kv_cache_mb));
  }
  saturn::ApplyEngineFlags(
      absl::GetFlag(FLAGS_max_num_seqs), absl::GetFlag(FLAGS_max_num_batched_tokens),
      absl::GetFlag(FLAGS_cuda_graphs), kv_cache_mb, absl::GetFlag(FLAGS_max_num_seqs_limit),
      absl::GetFlag(FLAGS_max_num_batched_tokens_limit), &config.engine);
  if (absl::Status s = config.Validate(); !s.ok()) return Fail(std::string(s.message()));

  saturn::ServerApp app(config);
  if (absl::Status s = app.StartListening(); !s.ok()) return Fail(std::string(s.message()));
  // A signal during loading stays pending and is taken by sigwait once loading is done.
  if (absl::Status s = app.LoadEngine(); !s.ok()) {
    app.Shutdown();
    return Fail(absl::StrCat("cannot start the engine: ", s.message()));
  }

  int sig = 0;
  sigwait(&signals, &sig);
  std::cerr << "saturn-server: received " << (sig == SIGINT ? "SIGINT" : "SIGTERM") << std::endl;
  app.Shutdown();
  return 0;
}
