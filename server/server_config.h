// The server's configuration: what saturn-server's flags become (main.cc, and the engine's
// flags in engine/engine_flags.h).
// Field names follow the flag names so that Validate()'s messages name the flag to fix.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "engine/engine.h"
#include "engine/measure/step_probe.h"

namespace saturn {

struct ServerConfig {
  std::string listen = "127.0.0.1:50051";  // host:port (port 0: pick a free one), or unix:path
  EngineConfig engine;                     // model, backend, limits, KV capacity, queue bound
  absl::Duration shutdown_grace = absl::Seconds(10);  // in-flight streams get this long
  // How often the HTTP API checks that a client is still there (a write to a closed
  // connection fails); a disconnect cancels its request within about two of these. No flag:
  // tests shorten it.
  absl::Duration http_client_check = absl::Seconds(1);
  // Server-level request limits (the engine checks the rest through ValidateRequest).
  int max_client_request_id_bytes = 256;
  int max_stop_token_ids = 256;
  // Diagnostics (docs/DIAGNOSTICS.md): how the device's ceilings are obtained at start.
  std::string calibration = "measure";  // measure | quick (shorter trials) | file
  std::string calibration_file;         // read with calibration == "file"
  std::string save_calibration;         // write the calibration here after start (optional)
  // Synthetic probe steps after calibration and on Recalibrate (engine/measure/step_probe.h): time
  // budget in ms (0: none; plans then rely on the window's own step shapes). --calibration=
  // quick uses an eighth of it.
  double probe_steps_ms = kDefaultProbeBudgetMs;
  // Memory for the step records diagnostics windows read (EngineConfig::step_history_bytes).
  int step_history_mb = 64;
  // Prometheus text endpoint: 0 off; -1 any free port (logged; tests); else the port. It
  // binds the host of `listen` (127.0.0.1 for unix: addresses).
  int metrics_port = 0;
  double metrics_window_seconds = 10;  // window of the saturn: diagnostics gauges
  // The OpenAI-compatible HTTP API (server/http/openai_http.h): 0 off; -1 any free port (logged);
  // else the port, on the host of `listen` as the metrics endpoint.
  int http_port = 0;
  // The model id /v1/models lists and requests name ("": --model as given).
  std::string served_model_name;
  // A Jinja chat template file in place of the model's own ("": the model's;
  // server/http/model_chat_template.h).
  std::string chat_template;
  // Security (server/security.h, docs/SECURITY.md). PEM files: cert + key turn TLS on (gRPC
  // and metrics); a client CA makes it mutual TLS.
  std::string tls_cert;
  std::string tls_key;
  std::string tls_client_ca;
  std::string auth_token_file;       // bearer token required for the admin methods
  std::string auth_scope = "admin";  // admin | all (every RPC and /metrics)
  std::string unix_socket_mode;      // octal permissions of a unix: socket ("" : the umask's)
  // No text tokenizer (token ids only), e.g. for a tokenizer.json Saturn cannot read.
  bool skip_tokenizer_init = false;

  // Checks every field; the error names the flag and the limit.
  absl::Status Validate() const;
};

// --unix_socket_mode as permission bits: 3 or 4 octal digits, at most 0777; -1 when empty.
absl::StatusOr<int> ParseSocketMode(const std::string& mode);

// The flags' units as the config's: --kv_cache_mb to bytes (0: automatic). A limit flag of 0
// means the engine's default limit, raised to the option's value when that is larger, so
// --max_num_seqs 512 alone is valid.
void ApplyEngineFlags(int max_num_seqs, int max_num_batched_tokens, bool cuda_graphs,
                      int kv_cache_mb, int max_num_seqs_limit, int max_num_batched_tokens_limit,
                      EngineConfig* engine);

}  // namespace saturn
