// saturn-server: flags -> ServerConfig -> ServerApp; waits for SIGINT/SIGTERM, then shuts
// down gracefully and exits 0 (a second signal cuts the grace period short; one before the
// engine serves exits 0 at once). Defines the server's own flags; the engine's (--model,
// --backend, --threads, dtypes, kernels) come from engine/engine_flags.h, shared with the bench
// tools.
#include <condition_variable>
#include <cstdlib>
#include <iostream>
#include <mutex>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "engine/engine_flags.h"
#include "engine/measure/step_probe.h"
#include "engine/tp/tp_worker.h"
#include "kernels/base/flags_help.h"
#include "kernels/comm/tp_world.h"
#include "server/server_app.h"
#include "server/shutdown_signals.h"

ABSL_FLAG(std::string, listen, "127.0.0.1:50051", "Address to listen on: host:port or unix:path");
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
          "1/8 of device memory)");
ABSL_FLAG(bool, cuda_graphs, false, "Replay CUDA graphs for decode steps (CUDA backend only)");
ABSL_FLAG(bool, enable_prefix_caching, true,
          "Requests take the KV blocks of a prefix already computed (automatic prefix caching, "
          "as vLLM v1); off (--noenable_prefix_caching), prompts are still hashed and the reuse "
          "missed is reported");
ABSL_FLAG(std::string, speculative, "none",
          "none | ngram: speculative decoding by n-gram lookup in each request's own prompt and "
          "output (vLLM's ngram method, llama.cpp's prompt lookup): greedy and seeded outputs "
          "keep their tokens; needs the plain step loop (async scheduling off; auto turns it "
          "off); requests asking for logprobs do not speculate");
ABSL_FLAG(int, num_speculative_tokens, 4,
          "Tokens proposed per decoding request and step with --speculative ngram (1-16; "
          "UpdateEngineOptions may change it, 0 turns speculation off)");
ABSL_FLAG(int, prompt_lookup_min, 1, "Shortest n-gram the ngram proposer matches (1-8)");
ABSL_FLAG(int, prompt_lookup_max, 4, "Longest n-gram the ngram proposer matches (1-8)");
ABSL_FLAG(std::string, event_thread, "auto",
          "auto | on | off | N: on, token events (stream writes) go out on their own threads "
          "(N of them; on: the CPU's spare cores, or one per 8 cores with CUDA, at most 4) while "
          "the engine runs the next step; off, on the engine thread inside each step (auto: on "
          "for CUDA and for a CPU backend with a core to spare, see --threads)");
ABSL_FLAG(std::string, async_scheduling, "auto",
          "auto | on | off: on, the engine schedules the next step while the device runs the "
          "current one and posts the current one's tokens while it runs the next (a decode "
          "whose input token is still on the device is fed from there); auto: on where the "
          "backend runs asynchronously (CUDA), off on the CPU backend, whose ops run as issued");
ABSL_FLAG(int, max_queued_requests, 1024,
          "Waiting requests beyond which Generate returns RESOURCE_EXHAUSTED (0: unbounded)");
ABSL_FLAG(int, step_history_mb, 64,
          "Memory for the step records diagnostics windows read (about 0.4 kB a step; 64 MiB: "
          "about 170k steps, 32 s at 5,300 steps a second); older steps stay at least an hour as "
          "per-second sums (about 2 MB), which a report's profile and verdict count, while its "
          "step model and plan read the records; in [0, 16384]");
ABSL_FLAG(absl::Duration, shutdown_grace, absl::Seconds(10),
          "On SIGINT/SIGTERM, how long in-flight streams may run before ending with UNAVAILABLE");
ABSL_FLAG(uint64_t, seed, 1234, "Seed of the built-in presets' random weights");
ABSL_FLAG(std::string, calibration, "measure",
          "measure: measure the device's GEMM peak, bandwidth and op dispatch cost at start; "
          "quick: the same with shorter trials and smaller buffers (tests); "
          "file: load them from --calibration_file");
ABSL_FLAG(double, probe_steps_ms, saturn::kDefaultProbeBudgetMs,
          "After calibration (and on Recalibrate), time synthetic decode and prefill steps "
          "through the model for at most this many ms, so the diagnostics plan predicts from "
          "measured step times across batch sizes (0: none)");
ABSL_FLAG(std::string, calibration_file, "",
          "Calibration JSON to load with --calibration=file (written by --save_calibration)");
ABSL_FLAG(std::string, save_calibration, "", "Write the calibration in force to this JSON file");
ABSL_FLAG(int, metrics_port, 0,
          "Serve Prometheus metrics at http://HOST:PORT/metrics, HOST being --listen's host "
          "(0: off; -1: any free port, logged)");
ABSL_FLAG(int, http_port, 0,
          "Serve the OpenAI-compatible HTTP API (/v1/completions, /v1/chat/completions, "
          "/v1/models, /health, and "
          "/metrics as --metrics_port serves it) at http://HOST:PORT, HOST being --listen's host "
          "(0: off; -1: any free port, logged)");
ABSL_FLAG(std::string, chat_template, "",
          "A Jinja chat template file for /v1/chat/completions, in place of the model's own "
          "(chat_template.jinja, tokenizer_config.json or the GGUF file's); vLLM's "
          "--chat-template. The model's bos_token and eos_token still fill it");
ABSL_FLAG(std::string, served_model_name, "",
          "The model id the HTTP API lists and requests name (empty: --model as given)");
ABSL_FLAG(double, metrics_window_seconds, 10,
          "Window of the saturn: diagnostics gauges (bottleneck class, MFU, MBU, busy)");
ABSL_FLAG(std::string, tls_cert, "",
          "PEM certificate chain: serve gRPC and /metrics over TLS (with --tls_key)");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls_cert");
ABSL_FLAG(std::string, tls_client_ca, "",
          "PEM CA certificates: require clients to present a certificate they signed (mTLS)");
ABSL_FLAG(std::string, auth_token_file, "",
          "File holding a bearer token that clients must send (\"authorization: Bearer TOKEN\") "
          "for the admin RPCs (UpdateEngineOptions, Recalibrate); see --auth_scope");
ABSL_FLAG(std::string, auth_scope, "admin",
          "admin: the token guards the admin RPCs; all: every RPC and GET /metrics");
ABSL_FLAG(std::string, unix_socket_mode, "",
          "Octal permissions of a unix: --listen socket, e.g. 0660 (empty: from the umask)");
ABSL_FLAG(bool, skip_tokenizer_init, false,
          "Load no text tokenizer: prompts are token ids only (as vLLM's flag); for a "
          "checkpoint whose tokenizer.json Saturn cannot read");

namespace {

int Fail(const std::string& what) {
  std::cerr << "saturn-server: " << what << std::endl;
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  // First: from here on SIGINT/SIGTERM go to the handler set below, never to their default
  // action (server/shutdown_signals.h). Until the engine is serving, a signal exits at once.
  saturn::ShutdownSignals signals;
  signals.SetHandler([](int sig, int /*count*/) {
    std::cerr << "saturn-server: received " << saturn::ShutdownSignals::Name(sig)
              << " while starting: exiting" << std::endl;
    std::_Exit(0);
  });
  saturn::ParseFlagsOnly(argc, argv, "Saturn LLM inference server (gRPC saturn.v1.Saturn)");

  // Tensor parallelism: ranks above 0 compute their shard of the steps rank 0 sends and leave
  // when it does; signals are rank 0's to act on (mpirun passes SIGTERM to every rank).
  std::unique_ptr<saturn::Communicator> tp_world;
  saturn::TpExitOnLeave tp_exit;
  if (const int tp = absl::GetFlag(FLAGS_tensor_parallel); tp > 1) {
    auto world = saturn::JoinTensorParallel(tp, "saturn-server");
    if (!world.ok()) return Fail(std::string(world.status().message()));
    tp_world = std::move(*world);
    if (tp_world->rank() > 0) {
      signals.SetHandler(nullptr);
      const std::string prefix = absl::StrCat("saturn-server rank ", tp_world->rank(), ": ");
      absl::Status s = saturn::RunTpWorker(tp_world.get(), prefix);
      if (s.ok()) return 0;
      // Out of step with rank 0, which may wait in a collective for it: every rank ends (a
      // plain exit would leave that to the launcher, and MPI_Finalize may wait for rank 0).
      std::cerr << prefix << s.message() << std::endl;
      tp_world->Abort(1);
    }
    tp_exit.comm = tp_world.get();
  }

  saturn::ServerConfig config;
  config.listen = absl::GetFlag(FLAGS_listen);
  config.engine = saturn::EngineConfigFromFlags();
  config.engine.tp_comm = tp_world.get();
  config.engine.max_model_len = absl::GetFlag(FLAGS_max_model_len);
  config.engine.max_queued_requests = absl::GetFlag(FLAGS_max_queued_requests);
  config.engine.event_thread = absl::GetFlag(FLAGS_event_thread);
  config.engine.async_scheduling = absl::GetFlag(FLAGS_async_scheduling);
  config.step_history_mb = absl::GetFlag(FLAGS_step_history_mb);
  config.engine.weight_seed = absl::GetFlag(FLAGS_seed);
  config.shutdown_grace = absl::GetFlag(FLAGS_shutdown_grace);
  config.calibration = absl::GetFlag(FLAGS_calibration);
  config.calibration_file = absl::GetFlag(FLAGS_calibration_file);
  config.save_calibration = absl::GetFlag(FLAGS_save_calibration);
  config.probe_steps_ms = absl::GetFlag(FLAGS_probe_steps_ms);
  config.metrics_port = absl::GetFlag(FLAGS_metrics_port);
  config.metrics_window_seconds = absl::GetFlag(FLAGS_metrics_window_seconds);
  config.http_port = absl::GetFlag(FLAGS_http_port);
  config.served_model_name = absl::GetFlag(FLAGS_served_model_name);
  config.chat_template = absl::GetFlag(FLAGS_chat_template);
  config.tls_cert = absl::GetFlag(FLAGS_tls_cert);
  config.tls_key = absl::GetFlag(FLAGS_tls_key);
  config.tls_client_ca = absl::GetFlag(FLAGS_tls_client_ca);
  config.auth_token_file = absl::GetFlag(FLAGS_auth_token_file);
  config.auth_scope = absl::GetFlag(FLAGS_auth_scope);
  config.unix_socket_mode = absl::GetFlag(FLAGS_unix_socket_mode);
  config.skip_tokenizer_init = absl::GetFlag(FLAGS_skip_tokenizer_init);
  const int kv_cache_mb = absl::GetFlag(FLAGS_kv_cache_mb);
  if (kv_cache_mb < 0) {
    return Fail(absl::StrCat("--kv_cache_mb: must be >= 0 (0: automatic), got ", kv_cache_mb));
  }
  saturn::ApplyEngineFlags(
      absl::GetFlag(FLAGS_max_num_seqs), absl::GetFlag(FLAGS_max_num_batched_tokens),
      absl::GetFlag(FLAGS_cuda_graphs), kv_cache_mb, absl::GetFlag(FLAGS_max_num_seqs_limit),
      absl::GetFlag(FLAGS_max_num_batched_tokens_limit), &config.engine);
  config.engine.options.prefix_caching = absl::GetFlag(FLAGS_enable_prefix_caching);
  const std::string speculative = absl::GetFlag(FLAGS_speculative);
  if (speculative != "none" && speculative != "ngram") {
    return Fail(absl::StrCat("--speculative: \"", speculative, "\" is not one of none or ngram"));
  }
  config.engine.options.num_speculative_tokens =
      speculative == "ngram" ? absl::GetFlag(FLAGS_num_speculative_tokens) : 0;
  if (speculative == "ngram" && config.engine.options.num_speculative_tokens < 1) {
    return Fail("--num_speculative_tokens: must be >= 1 with --speculative ngram");
  }
  config.engine.prompt_lookup_min = absl::GetFlag(FLAGS_prompt_lookup_min);
  config.engine.prompt_lookup_max = absl::GetFlag(FLAGS_prompt_lookup_max);
  if (absl::Status s = config.Validate(); !s.ok()) return Fail(std::string(s.message()));

  saturn::ServerApp app(config);
  if (absl::Status s = app.StartListening(); !s.ok()) return Fail(std::string(s.message()));
  if (absl::Status s = app.LoadEngine(); !s.ok()) {
    app.Shutdown();
    return Fail(absl::StrCat("cannot start the engine: ", s.message()));
  }

  // Serving: the first signal starts the graceful shutdown, the second ends its grace period
  // (in-flight streams end with UNAVAILABLE at once), later ones are only logged.
  std::mutex mu;
  std::condition_variable cv;
  int first_signal = 0;
  signals.SetHandler([&](int sig, int count) {
    const char* name = saturn::ShutdownSignals::Name(sig);
    if (count == 1) {
      std::cerr << "saturn-server: received " << name << std::endl;
      std::lock_guard<std::mutex> lock(mu);
      first_signal = sig;
      cv.notify_all();
    } else if (count == 2) {
      std::cerr << "saturn-server: received " << name << " again: ending the calls in flight now"
                << std::endl;
      app.EndGracePeriod();
    } else {
      std::cerr << "saturn-server: received " << name << ": already shutting down" << std::endl;
    }
  });
  {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return first_signal != 0; });
  }
  app.Shutdown();
  signals.SetHandler(nullptr);  // before `app` goes
  return 0;
}
