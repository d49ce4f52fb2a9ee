// The Prometheus endpoint (--metrics_port): GET /metrics serves text exposition format 0.0.4
// with vLLM-style serving figures (saturn:num_requests_running, ..., the request histograms of
// RequestMetrics) and Saturn's own gauges over the last diagnostics window (bottleneck class,
// MFU, MBU, busy fraction, calibrated ceilings). cpp-httplib serves it on its own threads;
// nothing here touches gRPC. The OpenAI-compatible API's port (--http_port) serves the same
// route (AddMetricsRoute), where vLLM serves it. Start/Stop are not thread-safe against each
// other (ServerApp calls them in order); scrapes run concurrently with everything else.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "server/diag/diagnostics_state.h"
#include "server/http/http_listener.h"
#include "server/serving_state.h"

namespace saturn {

// The whole exposition text. Reads the engine under a ServingState call token (engine
// gauges are omitted while loading or shutting down).
std::string RenderMetrics(ServingState* state, DiagnosticsState* diag, double window_seconds);

// Registers GET /metrics (RenderMetrics' text) on `http`; the pointers outlive the server.
void AddMetricsRoute(httplib::Server& http, ServingState* state, DiagnosticsState* diag,
                     double window_seconds);

class MetricsHttpServer final : public HttpEndpoint {
 public:
  MetricsHttpServer(ServingState* state, DiagnosticsState* diag, double window_seconds);
  ~MetricsHttpServer() override { Stop(); }

  absl::Status Start(const std::string& host, int port) override;

 private:
  ServingState* state_;
  DiagnosticsState* diag_;
  double window_seconds_;
};

}  // namespace saturn
