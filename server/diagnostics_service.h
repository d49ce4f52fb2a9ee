// saturn.v1.Diagnostics on the gRPC callback API: GetDiagnostics, WatchDiagnostics (a
// WatchReactor per stream), ExportTrace and Recalibrate. Handlers validate on the gRPC thread and
// hand the work (reading step records, analysing, rendering) to one shared TimerThread, so no gRPC
// thread waits or crunches. The engine comes from ServingState (UNAVAILABLE until it is
// ready); each task holds a ServingState call token while it reads the engine.
#pragma once

#include <grpcpp/grpcpp.h>

#include "saturn/v1/diagnostics.grpc.pb.h"
#include "server/diagnostics_state.h"
#include "server/serving_state.h"
#include "server/timer_thread.h"

namespace saturn {

class DiagnosticsService final : public v1::Diagnostics::CallbackService {
 public:
  DiagnosticsService(ServingState* state, DiagnosticsState* diag);
  ~DiagnosticsService() override;  // stops the timer thread (after the gRPC server is gone)

  grpc::ServerUnaryReactor* GetDiagnostics(grpc::CallbackServerContext* context,
                                           const v1::GetDiagnosticsRequest* request,
                                           v1::DiagnosticsReport* response) override;
  grpc::ServerWriteReactor<v1::DiagnosticsReport>* WatchDiagnostics(
      grpc::CallbackServerContext* context, const v1::WatchDiagnosticsRequest* request) override;
  grpc::ServerUnaryReactor* ExportTrace(grpc::CallbackServerContext* context,
                                        const v1::ExportTraceRequest* request,
                                        v1::ExportTraceResponse* response) override;
  // Runs on the timer thread (other diagnostics wait the few seconds it takes); the engine
  // pauses between two steps while the ceilings are measured.
  grpc::ServerUnaryReactor* Recalibrate(grpc::CallbackServerContext* context,
                                        const v1::RecalibrateRequest* request,
                                        v1::RecalibrateResponse* response) override;

 private:
  ServingState* state_;
  DiagnosticsState* diag_;
  TimerThread timer_;
};

}  // namespace saturn
