// saturn.v1.Diagnostics on the gRPC callback API: GetDiagnostics, WatchDiagnostics (a
// WatchReactor per stream), ExportTrace and Recalibrate. Handlers validate on the gRPC thread and
// hand the work (reading step records, analysing, rendering) to one shared TimerThread, so no gRPC
// thread waits or crunches. The engine comes from ServingState (UNAVAILABLE until it is
// ready); each task holds a ServingState call token while it reads the engine.
// All four methods are registered raw (grpc::ByteBuffer in and out; the same bytes on the wire)
// so that an unparseable request is INVALID_ARGUMENT with a reason (raw_message.h), as in
// saturn_service.h, not gRPC's message-less UNIMPLEMENTED.
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>

#include "saturn/v1/diagnostics.grpc.pb.h"
#include "server/diag/diagnostics_state.h"
#include "server/serving_state.h"
#include "server/timer_thread.h"

namespace saturn {

using DiagnosticsRawService = v1::Diagnostics::WithRawCallbackMethod_GetDiagnostics<
    v1::Diagnostics::WithRawCallbackMethod_WatchDiagnostics<
        v1::Diagnostics::WithRawCallbackMethod_ExportTrace<
            v1::Diagnostics::WithRawCallbackMethod_Recalibrate<v1::Diagnostics::Service>>>>;

class DiagnosticsService final : public DiagnosticsRawService {
 public:
  // WatchDiagnostics streams open at once; the next is RESOURCE_EXHAUSTED.
  static constexpr int kMaxWatchStreams = 64;

  DiagnosticsService(ServingState* state, DiagnosticsState* diag);
  ~DiagnosticsService() override;  // stops the timer thread (after the gRPC server is gone)

  grpc::ServerUnaryReactor* GetDiagnostics(grpc::CallbackServerContext* context,
                                           const grpc::ByteBuffer* raw,
                                           grpc::ByteBuffer* response) override;
  grpc::ServerWriteReactor<grpc::ByteBuffer>* WatchDiagnostics(
      grpc::CallbackServerContext* context, const grpc::ByteBuffer* raw) override;
  grpc::ServerUnaryReactor* ExportTrace(grpc::CallbackServerContext* context,
                                        const grpc::ByteBuffer* raw,
                                        grpc::ByteBuffer* response) override;
  // Runs on the timer thread (other diagnostics wait the few seconds it takes); the engine
  // pauses between two steps while the ceilings are measured. One at a time: a second call
  // while one is queued or running gets RESOURCE_EXHAUSTED.
  grpc::ServerUnaryReactor* Recalibrate(grpc::CallbackServerContext* context,
                                        const grpc::ByteBuffer* raw,
                                        grpc::ByteBuffer* response) override;

 private:
  ServingState* state_;
  DiagnosticsState* diag_;
  std::atomic<bool> recalibrating_{false};  // a Recalibrate call is queued or running
  std::atomic<int> watch_streams_{0};       // WatchDiagnostics streams not yet done
  TimerThread timer_;
};

}  // namespace saturn
