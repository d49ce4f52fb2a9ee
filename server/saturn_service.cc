// SaturnService. Handlers never block a gRPC thread on the engine: Generate hands off to the
// engine loop through Submit, and UpdateEngineOptions (which waits for a step boundary) runs
// on its own short-lived thread, registered with ServingState so shutdown waits for it.
#include "server/saturn_service.h"

#include <random>
#include <thread>
#include <utility>

#include "server/diagnostics_request.h"
#include "server/generate_reactor.h"
#include "server/report_proto.h"
#include "server/status_util.h"

namespace saturn {
namespace {

const grpc::Status kLoading(grpc::StatusCode::UNAVAILABLE,
                            "model is loading; retry when health reports SERVING");

uint64_t SplitMix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

}  // namespace

SaturnService::SaturnService(ServingState* state, DiagnosticsState* diag)
    : state_(state),
      diag_(diag),
      seed_counter_((static_cast<uint64_t>(std::random_device{}()) << 32) ^
                    std::random_device{}()) {}

PromptLimits SaturnService::Limits(const Engine& engine) const {
  PromptLimits l;
  l.max_model_len = engine.limits().max_model_len;
  l.has_text_tokenizer = state_->has_text_tokenizer();
  l.max_client_request_id_bytes = state_->config().max_client_request_id_bytes;
  l.max_stop_token_ids = state_->config().max_stop_token_ids;
  return l;
}

int64_t SaturnService::NextSeed() {
  // Non-negative so a client can pass the reported seed back unchanged.
  return static_cast<int64_t>(SplitMix64(seed_counter_.fetch_add(1)) >> 1);
}

grpc::ServerWriteReactor<v1::GenerateResponse>* SaturnService::Generate(
    grpc::CallbackServerContext* /*context*/, const v1::GenerateRequest* request) {
  Engine* engine = state_->engine();
  if (engine == nullptr) return GenerateReactor::Reject(kLoading);
  absl::StatusOr<ConvertedRequest> converted =
      ToEngineRequest(*request, Limits(*engine), NextSeed());
  if (!converted.ok()) return GenerateReactor::Reject(ToGrpcStatus(converted.status()));
  // Checked here as well as in Submit so that a bad request is INVALID_ARGUMENT whatever the
  // queue's state.
  absl::Status valid =
      ValidateForEngine(converted->request, engine->limits(), request->prompt_token_ids_size() > 0);
  if (!valid.ok()) return GenerateReactor::Reject(ToGrpcStatus(valid));
  return new GenerateReactor(state_, engine, std::move(converted->request), converted->want_text,
                             diag_ != nullptr ? diag_->request_metrics() : nullptr);
}

grpc::ServerUnaryReactor* SaturnService::GetServerInfo(grpc::CallbackServerContext* context,
                                                       const v1::GetServerInfoRequest* /*request*/,
                                                       v1::ServerInfo* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  Engine* engine = state_->engine();
  if (engine == nullptr) {
    reactor->Finish(kLoading);
    return reactor;
  }
  FillServerInfo(*engine, Limits(*engine), state_->listen_address(), response);
  if (diag_ != nullptr) FillCalibration(*diag_, response->mutable_calibration());
  ToProto(engine->graph_info(), response->mutable_cuda_graphs());
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerUnaryReactor* SaturnService::UpdateEngineOptions(
    grpc::CallbackServerContext* context, const v1::UpdateEngineOptionsRequest* request,
    v1::UpdateEngineOptionsResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  Engine* engine = state_->engine();
  if (engine == nullptr) {
    reactor->Finish(kLoading);
    return reactor;
  }
  std::optional<int64_t> token = state_->BeginCall(nullptr);
  if (!token.has_value()) {
    reactor->Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, "server shutting down"));
    return reactor;
  }
  // Engine::UpdateOptions waits for the next step boundary: keep that off gRPC's threads.
  std::thread([this, engine, request, response, reactor, t = *token] {
    absl::StatusOr<EngineOptions> applied;
    {
      std::lock_guard<std::mutex> lock(update_mu_);
      const EngineOptions before = engine->options();
      applied = engine->UpdateOptions(MergeOptions(before, *request));
      // In force from the step boundary UpdateOptions waited for: a plan action it matches
      // is tracked from here.
      if (applied.ok() && diag_ != nullptr) diag_->OnOptionsApplied(before, *applied, NowUs());
    }
    if (applied.ok()) ToProto(*applied, response->mutable_options());
    reactor->Finish(ToGrpcStatus(applied.status()));
    state_->EndCall(t);
  }).detach();
  return reactor;
}

}  // namespace saturn
