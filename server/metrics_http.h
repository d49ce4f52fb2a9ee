// The Prometheus endpoint (--metrics_port): GET /metrics serves text exposition format 0.0.4
// with vLLM-style serving figures (saturn:num_requests_running, ..., the request histograms of
// RequestMetrics) and Saturn's own gauges over the last diagnostics window (bottleneck class,
// MFU, MBU, busy fraction, calibrated ceilings). cpp-httplib serves it on its own threads;
// nothing here touches gRPC. Start/Stop are not thread-safe against each other (ServerApp
// calls them in order); scrapes run concurrently with everything else.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "server/diagnostics_state.h"
#include "server/http_listener.h"
#include "server/serving_state.h"

namespace saturn {

// The whole exposition text. Reads the engine under a ServingState call token (engine
// gauges are omitted while loading or shutting down).
std::string RenderMetrics(ServingState* state, DiagnosticsState* diag, double window_seconds);

class MetricsHttpServer {
 public:
  MetricsHttpServer(ServingState* state, DiagnosticsState* diag, double window_seconds);
  ~MetricsHttpServer();  // Stop()
  MetricsHttpServer(const MetricsHttpServer&) = delete;
  MetricsHttpServer& operator=(const MetricsHttpServer&) = delete;

  // Binds host:port (port -1: any free port) and serves on a background thread.
  absl::Status Start(const std::string& host, int port);
  // Stops serving and joins. Idempotent.
  void Stop();
  int port() const { return listener_.port(); }

 private:
  ServingState* state_;
  DiagnosticsState* diag_;
  double window_seconds_;
  HttpListener listener_;
};

}  // namespace saturn
