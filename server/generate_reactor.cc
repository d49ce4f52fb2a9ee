// The Generate RPC, whole: SaturnService::Generate (parse, convert, submit; declared in
// saturn_service.h) and GenerateReactor, the engine-event -> gRPC-write pump. All of a
// stream's shared state sits in Call behind one mutex; StartWrite and Finish are issued under
// it (gRPC never runs a reaction inline from them, so OnWriteDone cannot re-enter while it is
// held).
#include "server/generate_reactor.h"

#include <deque>
#include <iostream>
#include <mutex>
#include <optional>
#include <string>
#include <utility>

#include "server/grpc_handoff.h"
#include "server/proto_convert.h"
#include "server/raw_message.h"
#include "server/reject_reactor.h"
#include "server/saturn_service.h"
#include "server/status_util.h"
#include "server/text_stream.h"
#include "server/unary_call.h"

namespace saturn {

struct GenerateReactor::Call {
  std::mutex mu;
  GenerateReactor* reactor = nullptr;  // null once OnDone ran
  ServingState* state = nullptr;
  Engine* engine = nullptr;
  RequestMetrics* metrics = nullptr;  // set before Submit, then read-only
  std::optional<int64_t> call_token;  // ServingState registration
  int64_t request_id = 0;             // 0 until Submit returned
  std::string client_request_id;
  int64_t seed = 0;
  double received_us = 0;
  double last_token_us = 0;                  // event thread only: time of the previous token event
  const TextTokenizer* tokenizer = nullptr;  // null: no text in the deltas
  Utf8Stream text;

  std::deque<v1::GenerateResponse> pending;  // built, not yet written
  grpc::ByteBuffer writing;                  // the serialized message of the write in flight
  bool write_in_flight = false;
  bool drop_messages = false;  // client gone or stream aborted: only the status matters
  bool client_cancelled = false;
  bool aborted = false;                // ended by shutdown after the grace period
  std::optional<grpc::Status> finish;  // sent once `pending` has drained
  bool finish_called = false;

  // Starts the next write, or Finish once nothing is left. Requires mu.
  void PumpLocked() {
    if (reactor == nullptr || write_in_flight || finish_called) return;
    if (drop_messages) pending.clear();
    if (!pending.empty()) {
      SerializeResponse(pending.front(), &writing);
      pending.pop_front();
      write_in_flight = true;
      reactor->StartWrite(&writing);
      return;
    }
    if (finish.has_value()) {
      finish_called = true;
      reactor->Finish(*finish);
    }
  }

  // The engine's event thread. Never blocks beyond the mutex.
  void OnEvent(const TokenEvent& ev) {
    if (metrics != nullptr) metrics->ObserveEvent(ev, &last_token_us);
    std::lock_guard<std::mutex> lock(mu);
    std::string piece;
    if (tokenizer != nullptr) {
      std::string bytes;
      for (int id : ev.token_ids) bytes += tokenizer->TokenBytes(id);
      piece = text.Push(bytes);
      if (ev.final) piece += text.Flush();
    }
    if (!ev.token_ids.empty() || !piece.empty()) {
      v1::TokenDelta* d = pending.emplace_back().mutable_delta();
      d->mutable_token_ids()->Add(ev.token_ids.begin(), ev.token_ids.end());
      d->set_text(std::move(piece));
      d->set_server_time_us(static_cast<int64_t>(ev.time_us));
      d->set_elapsed_us(static_cast<int64_t>(ev.time_us - received_us));
      for (const PositionLogprobs& lp : ev.logprobs) ToProto(lp, d->add_logprobs());
      for (const PositionLogprobs& lp : ev.prompt_logprobs) ToProto(lp, d->add_prompt_logprobs());
    }
    if (ev.final) {
      if (ev.finish_reason == FinishReason::kError) {
        std::cerr << "saturn-server: request " << request_id << " (client id \""
                  << client_request_id << "\") failed: " << ev.error << "\n";
      }
      if (aborted) {
        finish = grpc::Status(grpc::StatusCode::UNAVAILABLE,
                              "server shutting down: request cancelled after the shutdown grace "
                              "period");
      } else if (client_cancelled) {
        finish = grpc::Status(grpc::StatusCode::CANCELLED, "cancelled by the client");
      } else {
        v1::GenerateFinal* f = pending.emplace_back().mutable_final();
        f->set_finish_reason(ToProto(ev.finish_reason));
        f->set_error(ev.error);
        ToProto(ev.usage, f->mutable_usage());
        ToProto(ev.timings, f->mutable_timings());
        f->set_request_id(request_id);
        f->set_client_request_id(client_request_id);
        f->set_seed(seed);
        finish = grpc::Status::OK;
      }
    }
    PumpLocked();
  }

  // Shutdown after the grace period: end the stream with UNAVAILABLE.
  void Abort() {
    int64_t id = 0;
    {
      std::lock_guard<std::mutex> lock(mu);
      // Already finished in the engine: let the final message go out (OK, not UNAVAILABLE).
      if (finish.has_value()) return;
      aborted = true;
      drop_messages = true;
      id = request_id;
    }
    if (id != 0) engine->Cancel(id);  // Submit not returned yet: the constructor cancels
  }
};

grpc::ServerWriteReactor<grpc::ByteBuffer>* GenerateReactor::Reject(const grpc::Status& status) {
  return new RejectReactor<grpc::ByteBuffer>(status);
}

GenerateReactor::GenerateReactor(ServingState* state, Engine* engine, GenerateRequest request,
                                 bool want_text, RequestMetrics* metrics)
    : call_(std::make_shared<Call>()) {
  HandOffToGrpc publish(this);
  Call& c = *call_;
  c.reactor = this;
  c.state = state;
  c.engine = engine;
  c.metrics = metrics;
  c.client_request_id = request.client_request_id;
  c.seed = request.sampling.seed;
  c.received_us = NowUs();
  c.tokenizer = want_text ? state->text_tokenizer() : nullptr;

  std::weak_ptr<Call> weak = call_;
  c.call_token = state->BeginCall([weak] {
    if (auto call = weak.lock()) call->Abort();
  });
  if (!c.call_token.has_value()) {
    std::lock_guard<std::mutex> lock(c.mu);
    c.finish = grpc::Status(grpc::StatusCode::UNAVAILABLE, "server shutting down");
    c.PumpLocked();
    return;
  }
  // The callback may run before Submit returns; it does not need the id.
  std::shared_ptr<Call> shared = call_;
  absl::StatusOr<int64_t> id =
      engine->Submit(std::move(request), [shared](const TokenEvent& ev) { shared->OnEvent(ev); });
  bool cancel_now = false;
  {
    std::lock_guard<std::mutex> lock(c.mu);
    if (!id.ok()) {
      c.finish = ToGrpcStatus(id.status());
      c.PumpLocked();
      return;
    }
    c.request_id = *id;
    cancel_now = c.aborted || c.client_cancelled;
  }
  if (cancel_now) engine->Cancel(*id);
}

void GenerateReactor::OnWriteDone(bool ok) {
  CalledBackByGrpc(this);
  std::lock_guard<std::mutex> lock(call_->mu);
  call_->write_in_flight = false;
  if (!ok) call_->drop_messages = true;  // the stream is broken; OnCancel follows
  call_->PumpLocked();
}

void GenerateReactor::OnCancel() {
  CalledBackByGrpc(this);
  int64_t id = 0;
  {
    std::lock_guard<std::mutex> lock(call_->mu);
    call_->client_cancelled = true;
    call_->drop_messages = true;
    id = call_->finish.has_value() ? 0 : call_->request_id;
  }
  // The engine answers with a final kCancelled event (after returning the KV blocks), which
  // finishes the stream. Before Submit returned, the constructor cancels instead.
  if (id != 0) call_->engine->Cancel(id);
}

void GenerateReactor::OnDone() {
  CalledBackByGrpc(this);
  EndReactorCall(*call_);
  delete this;
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
  absl::StatusOr<ConvertedRequest> converted =
      ToEngineRequest(request, Limits(*engine), NextSeed());
  if (!converted.ok()) return GenerateReactor::Reject(ToGrpcStatus(converted.status()));
  // The engine checks the rest of the request in Submit (before any queue limit), and the
  // reactor finishes the stream with its error.
  return new GenerateReactor(state_, engine, std::move(converted->request), converted->want_text,
                             diag_ != nullptr ? diag_->request_metrics() : nullptr);
}

}  // namespace saturn
