// DiagnosticsService: checks on the gRPC thread, work on the timer thread.
#include "server/diagnostics_service.h"

#include <functional>
#include <optional>
#include <utility>

#include "engine/diag/trace_export.h"
#include "server/diagnostics_request.h"
#include "server/status_util.h"
#include "server/watch_reactor.h"

namespace saturn {
namespace {

const grpc::Status kLoading(grpc::StatusCode::UNAVAILABLE,
                            "model is loading; retry when health reports SERVING");
const grpc::Status kShuttingDown(grpc::StatusCode::UNAVAILABLE, "server shutting down");

// Runs `work(engine)` on the timer thread under a call token, then finishes `reactor` with
// its status. Finishes at once with UNAVAILABLE when the server is loading or draining.
void RunUnary(ServingState* state, TimerThread* timer, grpc::ServerUnaryReactor* reactor,
              std::function<grpc::Status(Engine*)> work) {
  if (state->engine() == nullptr) {
    reactor->Finish(kLoading);
    return;
  }
  std::optional<int64_t> token = state->BeginCall(nullptr);
  if (!token.has_value()) {
    reactor->Finish(kShuttingDown);
    return;
  }
  const int64_t t = *token;
  const bool posted = timer->Post(TimerThread::Clock::now(), [state, reactor, t, work] {
    Engine* engine = state->engine();
    reactor->Finish(engine == nullptr ? kShuttingDown : work(engine));
    state->EndCall(t);
  });
  if (!posted) {
    reactor->Finish(kShuttingDown);
    state->EndCall(t);
  }
}

}  // namespace

DiagnosticsService::DiagnosticsService(ServingState* state, DiagnosticsState* diag)
    : state_(state), diag_(diag) {}

DiagnosticsService::~DiagnosticsService() { timer_.Stop(); }

grpc::ServerUnaryReactor* DiagnosticsService::GetDiagnostics(
    grpc::CallbackServerContext* context, const v1::GetDiagnosticsRequest* request,
    v1::DiagnosticsReport* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  // Checked before anything else so that a bad request is INVALID_ARGUMENT in any state.
  absl::StatusOr<DiagWindow> window = ResolveWindow(*request, NowUs());
  absl::Status points = ValidateStepPoints(request->max_step_points());
  if (!window.ok() || !points.ok()) {
    reactor->Finish(ToGrpcStatus(!window.ok() ? window.status() : points));
    return reactor;
  }
  DiagnosticsState* diag = diag_;
  RunUnary(state_, &timer_, reactor, [diag, request, response, w = *window](Engine* engine) {
    FillReport(*engine, diag, w, request->include_json(), request->max_step_points(), response);
    return grpc::Status::OK;
  });
  return reactor;
}

grpc::ServerWriteReactor<v1::DiagnosticsReport>* DiagnosticsService::WatchDiagnostics(
    grpc::CallbackServerContext* /*context*/, const v1::WatchDiagnosticsRequest* request) {
  absl::StatusOr<double> window = ResolveWindowSeconds(request->window_seconds());
  if (!window.ok()) return RejectWatch(ToGrpcStatus(window.status()));
  absl::StatusOr<int> interval = ResolveIntervalMs(request->interval_ms());
  if (!interval.ok()) return RejectWatch(ToGrpcStatus(interval.status()));
  if (state_->engine() == nullptr) return RejectWatch(kLoading);
  return new WatchReactor(state_, diag_, &timer_, *window, *interval, request->include_json());
}

grpc::ServerUnaryReactor* DiagnosticsService::ExportTrace(grpc::CallbackServerContext* context,
                                                          const v1::ExportTraceRequest* request,
                                                          v1::ExportTraceResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  Engine* engine = state_->engine();
  if (engine == nullptr) {
    reactor->Finish(kLoading);
    return reactor;
  }
  absl::StatusOr<size_t> n = ResolveTraceSteps(request->max_steps(), engine->steps().capacity());
  if (!n.ok()) {
    reactor->Finish(ToGrpcStatus(n.status()));
    return reactor;
  }
  RunUnary(state_, &timer_, reactor, [response, n = *n](Engine* e) {
    const std::vector<StepRecord> steps = e->steps().Last(n);
    response->set_trace_json(ExportChromeTrace(steps));
    response->set_num_steps(static_cast<int>(steps.size()));
    return grpc::Status::OK;
  });
  return reactor;
}

grpc::ServerUnaryReactor* DiagnosticsService::Recalibrate(grpc::CallbackServerContext* context,
                                                          const v1::RecalibrateRequest* /*request*/,
                                                          v1::RecalibrateResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  DiagnosticsState* diag = diag_;
  RunUnary(state_, &timer_, reactor, [diag, response](Engine* engine) {
    FillCalibration(*diag, response->mutable_previous());
    absl::StatusOr<Calibration> cal = diag->Recalibrate(engine);
    if (!cal.ok()) return ToGrpcStatus(cal.status());
    FillCalibration(*diag, response->mutable_calibration());
    return grpc::Status::OK;
  });
  return reactor;
}

}  // namespace saturn
