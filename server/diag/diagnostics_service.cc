// DiagnosticsService: checks on the gRPC thread, work on the timer thread (RunUnary).
#include "server/diag/diagnostics_service.h"

#include <functional>
#include <memory>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/diag/trace_export.h"
#include "server/diag/diagnostics_request.h"
#include "server/diag/watch_reactor.h"
#include "server/grpc/raw_message.h"
#include "server/grpc/status_util.h"
#include "server/grpc/unary_call.h"

namespace saturn {
namespace {

// Posts a unary call's work to the service's one timer thread (unary_call.h's RunUnary).
UnaryPoster OnTimer(TimerThread* timer) {
  return [timer](std::function<void()> work) {
    return timer->Post(TimerThread::Clock::now(), std::move(work));
  };
}

}  // namespace

DiagnosticsService::DiagnosticsService(ServingState* state, DiagnosticsState* diag)
    : state_(state), diag_(diag) {}

DiagnosticsService::~DiagnosticsService() { timer_.Stop(); }

grpc::ServerUnaryReactor* DiagnosticsService::GetDiagnostics(grpc::CallbackServerContext* context,
                                                             const grpc::ByteBuffer* raw,
                                                             grpc::ByteBuffer* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  v1::GetDiagnosticsRequest request;
  if (!ParseOrFinish(*raw, &request, reactor)) return reactor;
  // Checked before anything else so that a bad request is INVALID_ARGUMENT in any state.
  absl::StatusOr<DiagWindow> window = ResolveWindow(request, NowUs());
  absl::Status points = ValidateStepPoints(request.max_step_points());
  if (!window.ok() || !points.ok()) {
    reactor->Finish(ToGrpcStatus(!window.ok() ? window.status() : points));
    return reactor;
  }
  DiagnosticsState* diag = diag_;
  auto report = std::make_shared<v1::DiagnosticsReport>();
  RunUnary(state_, OnTimer(&timer_), context, reactor, report, response,
           [diag, report, w = *window,
            content = ReportContent{request.include_json(), request.max_step_points(),
                                    request.include_recording()}](Engine* engine) {
             FillReport(*engine, diag, w, content, report.get());
             return grpc::Status::OK;
           });
  return reactor;
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* DiagnosticsService::WatchDiagnostics(
    grpc::CallbackServerContext* /*context*/, const grpc::ByteBuffer* raw) {
  v1::WatchDiagnosticsRequest request;
  if (absl::Status s = ParseRequest(*raw, &request); !s.ok()) return RejectWatch(ToGrpcStatus(s));
  absl::StatusOr<double> window = ResolveWindowSeconds(request.window_seconds());
  if (!window.ok()) return RejectWatch(ToGrpcStatus(window.status()));
  absl::StatusOr<int> interval = ResolveIntervalMs(request.interval_ms());
  if (!interval.ok()) return RejectWatch(ToGrpcStatus(interval.status()));
  if (state_->engine() == nullptr) return RejectWatch(LoadingStatus());
  // Every open stream builds its reports on the one timer thread: past the limit, the next is
  // refused rather than slowing every report (and GetDiagnostics) behind it.
  if (watch_streams_.fetch_add(1) >= kMaxWatchStreams) {
    watch_streams_.fetch_sub(1);
    return RejectWatch(grpc::Status(
        grpc::StatusCode::RESOURCE_EXHAUSTED,
        absl::StrCat("WatchDiagnostics: ", kMaxWatchStreams,
                     " streams are open, the limit; close one, or poll GetDiagnostics")));
  }
  std::shared_ptr<void> slot(nullptr, [n = &watch_streams_](void*) { n->fetch_sub(1); });
  return new WatchReactor(state_, diag_, &timer_, *window, *interval, request.include_json(),
                          std::move(slot));
}

grpc::ServerUnaryReactor* DiagnosticsService::ExportTrace(grpc::CallbackServerContext* context,
                                                          const grpc::ByteBuffer* raw,
                                                          grpc::ByteBuffer* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  v1::ExportTraceRequest request;
  if (!ParseOrFinish(*raw, &request, reactor)) return reactor;
  Engine* engine = EngineOrFinish(*state_, reactor);
  if (engine == nullptr) return reactor;
  absl::StatusOr<size_t> n = ResolveTraceSteps(request.max_steps(), engine->steps().ops_capacity());
  if (!n.ok()) {
    reactor->Finish(ToGrpcStatus(n.status()));
    return reactor;
  }
  auto trace = std::make_shared<v1::ExportTraceResponse>();
  RunUnary(state_, OnTimer(&timer_), context, reactor, trace, response, [trace, n = *n](Engine* e) {
    const std::vector<StepRecord> steps = e->steps().Last(n);
    trace->set_trace_json(ExportChromeTrace(steps));
    trace->set_num_steps(static_cast<int>(steps.size()));
    return grpc::Status::OK;
  });
  return reactor;
}

grpc::ServerUnaryReactor* DiagnosticsService::Recalibrate(grpc::CallbackServerContext* context,
                                                          const grpc::ByteBuffer* raw,
                                                          grpc::ByteBuffer* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  v1::RecalibrateRequest request;
  if (!ParseOrFinish(*raw, &request, reactor)) return reactor;
  // One at a time: each takes the device for seconds, and callers queued behind one another
  // would hold serving up for all of them.
  if (recalibrating_.exchange(true)) {
    reactor->Finish(grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                                 "Recalibrate: another call's calibration is queued or running; "
                                 "retry when it has finished"));
    return reactor;
  }
  DiagnosticsState* diag = diag_;
  auto result = std::make_shared<v1::RecalibrateResponse>();
  // Cleared when the last copy of the work is gone: after it ran, or once the call finished
  // without it (loading, draining, cancelled).
  std::shared_ptr<void> busy(nullptr, [flag = &recalibrating_](void*) { flag->store(false); });
  RunUnary(state_, OnTimer(&timer_), context, reactor, result, response,
           [diag, result, busy](Engine* engine) {
             FillCalibration(diag->session(), result->mutable_previous());
             absl::StatusOr<Calibration> cal = diag->session().Recalibrate(engine);
             if (!cal.ok()) return ToGrpcStatus(cal.status());
             FillCalibration(diag->session(), result->mutable_calibration());
             return grpc::Status::OK;
           });
  return reactor;
}

}  // namespace saturn
