// ServerConfig validation. Messages start with the flag name ("--listen: ...") because the
// only way a user sets these is through saturn-server's flags.
#include "server/server_config.h"

#include <algorithm>
#include <cstdint>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "kernels/cpu/thread_pool.h"
#include "server/listen_address.h"

namespace saturn {
namespace {

absl::Status ValidateListen(const std::string& listen) {
  if (listen.empty()) return absl::InvalidArgumentError("--listen: must not be empty");
  if (absl::StartsWith(listen, "unix:")) {
    if (listen.size() == 5) return absl::InvalidArgumentError("--listen: unix: needs a path");
    return absl::OkStatus();
  }
  const size_t colon = listen.rfind(':');
  if (colon == std::string::npos || colon == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--listen: \"", listen, "\" is not host:port (e.g. 127.0.0.1:50051, [::]:50051)"));
  }
  int port = -1;
  if (!absl::SimpleAtoi(listen.substr(colon + 1), &port) || port < 0 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("--listen: port in \"", listen, "\" must be a number in [0, 65535]"));
  }
  return absl::OkStatus();
}

absl::Status ValidateSecurity(const ServerConfig& c) {
  if (c.tls_cert.empty() != c.tls_key.empty()) {
    return absl::InvalidArgumentError(
        "--tls_cert, --tls_key: set both (the certificate chain and its private key) or neither");
  }
  if (!c.tls_client_ca.empty() && c.tls_cert.empty()) {
    return absl::InvalidArgumentError(
        "--tls_client_ca: mutual TLS needs --tls_cert and --tls_key as well");
  }
  if (c.auth_scope != "admin" && c.auth_scope != "all") {
    return absl::InvalidArgumentError(
        absl::StrCat("--auth_scope: \"", c.auth_scope, "\" is not one of admin, all"));
  }
  if (c.auth_scope == "all" && c.auth_token_file.empty()) {
    return absl::InvalidArgumentError("--auth_scope=all: needs --auth_token_file");
  }
  if (!c.auth_token_file.empty() && c.tls_cert.empty() && !IsLoopbackListen(c.listen)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--auth_token_file: on a non-loopback --listen (", c.listen,
        ") the token needs --tls_cert and --tls_key; in plaintext it can be read off the "
        "network"));
  }
  absl::StatusOr<int> mode = ParseSocketMode(c.unix_socket_mode);
  if (!mode.ok()) return mode.status();
  if (*mode >= 0 && !absl::StartsWith(c.listen, "unix:")) {
    return absl::InvalidArgumentError("--unix_socket_mode: only for a unix: --listen address");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<int> ParseSocketMode(const std::string& mode) {
  if (mode.empty()) return -1;
  int bits = 0;
  bool ok = mode.size() >= 3 && mode.size() <= 4;
  for (char ch : mode) {
    if (ch < '0' || ch > '7') ok = false;
    bits = bits * 8 + (ch - '0');
  }
  if (!ok || bits > 0777) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--unix_socket_mode: \"", mode, "\" is not octal permission bits such as 0660 or 600"));
  }
  return bits;
}

absl::Status ServerConfig::Validate() const {
  if (absl::Status s = ValidateListen(listen); !s.ok()) return s;
  if (engine.backend != "auto" && engine.backend != "cpu" && engine.backend != "cuda") {
    return absl::InvalidArgumentError(
        absl::StrCat("--backend: \"", engine.backend, "\" is not one of auto, cpu, cuda"));
  }
  if (absl::Status s = ParseEventThread(engine.event_thread).status(); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--", s.message()));
  }
  if (absl::Status s = ResolveAsyncScheduling(engine.async_scheduling, false).status(); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--", s.message()));
  }
  if (engine.model.empty()) {
    return absl::InvalidArgumentError("--model: must name a preset or a checkpoint directory");
  }
  if (engine.num_threads < 0 || engine.num_threads > cpu::ThreadPool::kMaxThreads) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--threads: must be in [0, %d] (0: all cores), got %d",
                        cpu::ThreadPool::kMaxThreads, engine.num_threads));
  }
  // The engine's range checks of the limits and the live options; its fields are the flags'
  // names.
  if (absl::Status s =
          CheckEngineLimits(engine.max_num_seqs_limit, engine.max_num_batched_tokens_limit);
      !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--", s.message()));
  }
  if (absl::Status s = CheckEngineOptions(engine.options, engine.max_num_seqs_limit,
                                          engine.max_num_batched_tokens_limit);
      !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--", s.message()));
  }
  if (engine.max_model_len < 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--max_model_len: must be >= 0 (0: the model's context, at most 4096), got %d",
        engine.max_model_len));
  }
  if (step_history_mb < 0 || step_history_mb > 16384) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--step_history_mb: must be in [0, 16384], got %d", step_history_mb));
  }
  if (engine.max_queued_requests < 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--max_queued_requests: must be >= 0 (0: unbounded), got %d", engine.max_queued_requests));
  }
  if (shutdown_grace < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--shutdown_grace: must be >= 0, got ", absl::FormatDuration(shutdown_grace)));
  }
  if (!(probe_steps_ms >= 0 && probe_steps_ms <= 600000)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--probe_steps_ms: must be in [0, 600000] (0: no probe steps), got %g", probe_steps_ms));
  }
  if (calibration != "measure" && calibration != "quick" && calibration != "file") {
    return absl::InvalidArgumentError(
        absl::StrCat("--calibration: \"", calibration, "\" is not one of measure, quick, file"));
  }
  if (calibration == "file" && calibration_file.empty()) {
    return absl::InvalidArgumentError(
        "--calibration_file: required with --calibration=file (a file --save_calibration wrote)");
  }
  if (calibration != "file" && !calibration_file.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--calibration_file: only read with --calibration=file (got --calibration=", calibration,
        ")"));
  }
  if (metrics_port < -1 || metrics_port > 65535) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--metrics_port: must be in [0, 65535] (0: off; -1: any free port), got %d", metrics_port));
  }
  if (http_port < -1 || http_port > 65535) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--http_port: must be in [0, 65535] (0: off; -1: any free port), got %d", http_port));
  }
  if (http_port > 0 && http_port == metrics_port) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--http_port: %d is --metrics_port's too; give each its own", http_port));
  }
  if (served_model_name.size() > 256 ||
      served_model_name.find_first_of("\"\\\n\r") != std::string::npos) {
    return absl::InvalidArgumentError(
        "--served_model_name: at most 256 bytes, without quotes, backslashes or line breaks");
  }
  // Blank (spaces only) is no name a client could send back as "model".
  if (!served_model_name.empty() &&
      served_model_name.find_first_not_of(" \t") == std::string::npos) {
    return absl::InvalidArgumentError("--served_model_name: blank (empty: --model as given)");
  }
  if (!(metrics_window_seconds > 0 && metrics_window_seconds <= 3600)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--metrics_window_seconds: must be in (0, 3600], got %g", metrics_window_seconds));
  }
  if (absl::Status s = ValidateSecurity(*this); !s.ok()) return s;
  // The engine's own checks (limits, KV capacity, ...): its messages name its fields, which
  // are the flags' names.
  if (absl::Status s = engine.Validate(); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat("engine flags: ", s.message()));
  }
  return absl::OkStatus();
}

void ApplyEngineFlags(int max_num_seqs, int max_num_batched_tokens, bool cuda_graphs,
                      int kv_cache_mb, int max_num_seqs_limit, int max_num_batched_tokens_limit,
                      EngineConfig* engine) {
  engine->options.max_num_seqs = max_num_seqs;
  engine->options.max_num_batched_tokens = max_num_batched_tokens;
  engine->options.cuda_graphs = cuda_graphs;
  engine->max_num_seqs_limit = max_num_seqs_limit != 0
                                   ? max_num_seqs_limit
                                   : std::max(engine->max_num_seqs_limit, max_num_seqs);
  engine->max_num_batched_tokens_limit =
      max_num_batched_tokens_limit != 0
          ? max_num_batched_tokens_limit
          : std::max(engine->max_num_batched_tokens_limit, max_num_batched_tokens);
  engine->kv_cache_bytes = kv_cache_mb > 0 ? static_cast<size_t>(kv_cache_mb) << 20 : 0;
}

}  // namespace saturn
