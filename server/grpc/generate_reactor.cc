// The Generate RPC, whole: SaturnService::Generate (parse, the request intake, submit;
// declared in saturn_service.h) and GenerateReactor, which joins the request's engine side
// (server/request_intake.h) to its write pump (write_pump.h). All of a stream's shared state sits
// in Call behind one mutex.
#include "server/grpc/generate_reactor.h"

#include <iostream>
#include <mutex>
#include <optional>
#include <string>
#include <utility>

#include "server/grpc/grpc_handoff.h"
#include "server/grpc/proto_convert.h"
#include "server/grpc/raw_message.h"
#include "server/grpc/reject_reactor.h"
#include "server/grpc/saturn_service.h"
#include "server/grpc/status_util.h"
#include "server/grpc/unary_call.h"
#include "server/grpc/write_pump.h"
#include "server/request_intake.h"
#include "server/text_stream.h"

namespace saturn {

struct GenerateReactor::Call final : PumpedReactor::Call {
  EngineCall engine;
  std::string client_request_id;
  int64_t seed = 0;
  double received_us = 0;
  const TextTokenizer* tokenizer = nullptr;  // null: no text in the deltas
  Utf8Stream text;
  bool client_cancelled = false;
  bool aborted = false;  // ended by shutdown after the grace period

  // The engine's event thread. Never blocks beyond the mutex.
  void OnEvent(const TokenEvent& ev) {
    std::lock_guard<std::mutex> lock(mu);
    std::string piece;
    if (tokenizer != nullptr) {
      std::string bytes;
      for (int id : ev.token_ids) bytes += tokenizer->TokenBytes(id);
      piece = text.Push(bytes);
      if (ev.final) piece += text.Flush();
    }
    if (!ev.token_ids.empty() || !piece.empty()) {
      v1::GenerateResponse response;
      v1::TokenDelta* d = response.mutable_delta();
      d->mutable_token_ids()->Add(ev.token_ids.begin(), ev.token_ids.end());
      d->set_text(std::move(piece));
      d->set_server_time_us(static_cast<int64_t>(ev.time_us));
      d->set_elapsed_us(static_cast<int64_t>(ev.time_us - received_us));
      for (const PositionLogprobs& lp : ev.logprobs) ToProto(lp, d->add_logprobs());
      for (const PositionLogprobs& lp : ev.prompt_logprobs) ToProto(lp, d->add_prompt_logprobs());
      pump.Write(response);
    }
    if (!ev.final) return;
    if (ev.finish_reason == FinishReason::kError) {
      std::cerr << "saturn-server: request " << engine.request_id() << " (client id \""
                << client_request_id << "\") failed: " << ev.error << "\n";
    }
    if (aborted) {
      pump.Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE,
                               "server shutting down: request cancelled after the shutdown grace "
                               "period"));
    } else if (client_cancelled) {
      pump.Finish(grpc::Status(grpc::StatusCode::CANCELLED, "cancelled by the client"));
    } else {
      v1::GenerateResponse response;
      v1::GenerateFinal* f = response.mutable_final();
      f->set_finish_reason(ToProto(ev.finish_reason));
      f->set_error(ev.error);
      ToProto(ev.usage, f->mutable_usage());
      ToProto(ev.timings, f->mutable_timings());
      f->set_request_id(engine.request_id());
      f->set_client_request_id(client_request_id);
      f->set_seed(seed);
      pump.Write(response);
      pump.Finish(grpc::Status::OK);
    }
  }

  // Shutdown after the grace period: end the stream with UNAVAILABLE.
  void Abort() {
    {
      std::lock_guard<std::mutex> lock(mu);
      // Already finished in the engine: let the final message go out (OK, not UNAVAILABLE).
      if (pump.finishing()) return;
      aborted = true;
      pump.DropMessages();
    }
    engine.Cancel();
  }

  void WriteDone(bool ok) override {
    std::lock_guard<std::mutex> lock(mu);
    pump.WriteDone(ok);  // not ok: the stream is broken; OnCancel follows
  }

  void ClientCancelled() override {
    bool cancel = false;
    {
      std::lock_guard<std::mutex> lock(mu);
      client_cancelled = true;
      pump.DropMessages();
      cancel = !pump.finishing();
    }
    // The engine answers with a final kCancelled event (after returning the KV blocks), which
    // finishes the stream.
    if (cancel) engine.Cancel();
  }
};

grpc::ServerWriteReactor<grpc::ByteBuffer>* GenerateReactor::Reject(const grpc::Status& status) {
  return new RejectReactor<grpc::ByteBuffer>(status);
}

GenerateReactor::GenerateReactor(std::shared_ptr<Call> call) : PumpedReactor(std::move(call)) {}

GenerateReactor::GenerateReactor(ServingState* state, Engine* engine, GenerateRequest request,
                                 bool want_text, RequestMetrics* metrics)
    : GenerateReactor(std::make_shared<Call>()) {
  HandOffToGrpc publish(this);
  Call& c = static_cast<Call&>(*call_);
  c.state = state;
  c.client_request_id = request.client_request_id;
  c.seed = request.sampling.seed;
  c.received_us = NowUs();
  c.tokenizer = want_text ? state->text_tokenizer() : nullptr;

  std::weak_ptr<PumpedReactor::Call> weak = call_;
  c.call_token = state->BeginCall([weak] {
    if (auto call = weak.lock()) static_cast<Call&>(*call).Abort();
  });
  if (!c.call_token.has_value()) {
    std::lock_guard<std::mutex> lock(c.mu);
    c.pump.Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, "server shutting down"));
    return;
  }
  // The callback may run before Submit returns; a cancel before then is issued once it has.
  std::shared_ptr<Call> shared = std::static_pointer_cast<Call>(call_);
  absl::StatusOr<int64_t> id = c.engine.Submit(
      engine, metrics, std::move(request), [shared](const TokenEvent& ev) { shared->OnEvent(ev); });
  if (!id.ok()) {
    std::lock_guard<std::mutex> lock(c.mu);
    c.pump.Finish(ToGrpcStatus(id.status()));
  }
}

// ---- the handler -----------------------------------------------------------------------

grpc::ServerWriteReactor<grpc::ByteBuffer>* SaturnService::Generate(
    grpc::CallbackServerContext* /*context*/, const grpc::ByteBuffer* raw) {
  v1::GenerateRequest request;
  if (absl::Status s = ParseRequest(*raw, &request); !s.ok()) {
    return GenerateReactor::Reject(ToGrpcStatus(s));
  }
  Engine* engine = state_->engine();
  if (engine == nullptr) return GenerateReactor::Reject(LoadingStatus());
  absl::StatusOr<ConvertedRequest> converted = state_->intake()->Convert(request);
  if (!converted.ok()) return GenerateReactor::Reject(ToGrpcStatus(converted.status()));
  // The engine checks the rest of the request in Submit (before any queue limit), and the
  // reactor finishes the stream with its error.
  return new GenerateReactor(state_, engine, std::move(converted->request), converted->want_text,
                             diag_ != nullptr ? diag_->request_metrics() : nullptr);
}

}  // namespace saturn
