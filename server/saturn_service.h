// saturn.v1.Saturn on the gRPC callback API: Generate (a GenerateReactor per stream),
// GetServerInfo, UpdateEngineOptions. Holds no engine state of its own: everything comes
// from ServingState, so the service exists (answering UNAVAILABLE) before the model loads.
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <cstdint>
#include <mutex>

#include "saturn/v1/saturn.grpc.pb.h"
#include "server/diagnostics_state.h"
#include "server/proto_convert.h"
#include "server/serving_state.h"

namespace saturn {

class SaturnService final : public v1::Saturn::CallbackService {
 public:
  // `diag` (optional): calibration for GetServerInfo, plan tracking on UpdateEngineOptions,
  // request metrics from Generate. Outlives the service.
  explicit SaturnService(ServingState* state, DiagnosticsState* diag = nullptr);

  grpc::ServerWriteReactor<v1::GenerateResponse>* Generate(
      grpc::CallbackServerContext* context, const v1::GenerateRequest* request) override;
  grpc::ServerUnaryReactor* GetServerInfo(grpc::CallbackServerContext* context,
                                          const v1::GetServerInfoRequest* request,
                                          v1::ServerInfo* response) override;
  grpc::ServerUnaryReactor* UpdateEngineOptions(grpc::CallbackServerContext* context,
                                                const v1::UpdateEngineOptionsRequest* request,
                                                v1::UpdateEngineOptionsResponse* response) override;

 private:
  PromptLimits Limits(const Engine& engine) const;
  int64_t NextSeed();

  ServingState* state_;
  DiagnosticsState* diag_;
  std::atomic<uint64_t> seed_counter_;
  // Serializes UpdateEngineOptions' read-merge-apply, so concurrent partial updates compose.
  std::mutex update_mu_;
};

}  // namespace saturn
