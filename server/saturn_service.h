// saturn.v1.Saturn on the gRPC callback API: Generate (a GenerateReactor per stream),
// GetServerInfo, UpdateEngineOptions. Holds no engine state of its own: everything comes
// from ServingState, so the service exists (answering UNAVAILABLE) before the model loads.
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <cstdint>
#include <mutex>

#include "saturn/v1/saturn.grpc.pb.h"
#include "server/proto_convert.h"
#include "server/serving_state.h"

namespace saturn {

class SaturnService final : public v1::Saturn::CallbackService {
 public:
  explicit SaturnService(ServingState* state);

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
  std::atomic<uint64_t> seed_counter_;
  // Serializes UpdateEngineOptions' read-merge-apply, so concurrent partial updates compose.
  std::mutex update_mu_;
};

}  // namespace saturn
