// The OpenAI-compatible HTTP API (--http_port), served by cpp-httplib on its own worker
// threads beside gRPC, over the same engine:
//   POST /v1/completions   (stream: server-sent events ending in "data: [DONE]"; a list of
//                           prompts is answered as one choice per prompt, by index)
//   POST /v1/chat/completions  (the messages rendered by the model's chat template into the
//                           prompt; 400 naming why where the model has none Saturn can render)
//   GET  /v1/models, GET /health (200 serving, 503 loading or draining)
//   GET  /metrics  (the same Prometheus text as --metrics_port: metrics_http.h)
// A completion takes the gRPC Generate path's checks and engine request, one per prompt
// (openai_protocol.h -> the request intake, server/request_intake.h -> Engine::Submit;
// openai_call.h), the same TLS and bearer token (http_listener.h), and the same request
// metrics. A client that disconnects cancels its requests, and their KV blocks return to the
// cache; a prompt that fails ends the others. Start/Stop are called in order by ServerApp; Stop
// comes after every call has ended.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "server/diag/diagnostics_state.h"
#include "server/http/http_listener.h"
#include "server/http/model_chat_template.h"
#include "server/http/openai_protocol.h"
#include "server/serving_state.h"

namespace httplib {
struct Request;
}  // namespace httplib

namespace saturn {

class OpenAiHttpServer final : public HttpEndpoint {
 public:
  // `model_name` is the id /v1/models lists and requests may name; `diag` (optional) keeps
  // the request metrics.
  OpenAiHttpServer(ServingState* state, DiagnosticsState* diag, std::string model_name);
  ~OpenAiHttpServer() override { Stop(); }

  absl::Status Start(const std::string& host, int port) override;

 private:
  // POST /v1/completions, on the worker thread that serves it.
  void Complete(const httplib::Request& req, httplib::Response& res);
  // POST /v1/chat/completions: the messages rendered by the model's chat template, encoded as
  // transformers' apply_chat_template encodes them, then served as a completion is.
  void Chat(const httplib::Request& req, httplib::Response& res);
  // A parsed request's prompts admitted, submitted and answered (streamed or whole).
  void Serve(CompletionRequest parsed, bool chat, httplib::Response& res);

  ServingState* state_;
  DiagnosticsState* diag_;
  std::string model_name_;
  int64_t created_;                  // /v1/models' "created": when the server started
  std::atomic<int64_t> next_id_{1};  // completion ids
  // The model's chat template, or why chat requests are refused (model_chat_template.h).
  absl::StatusOr<ModelChatTemplate> chat_;
};

}  // namespace saturn
