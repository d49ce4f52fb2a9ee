// Saturn's server-streaming reactors (Generate, WatchDiagnostics), their common part:
// PumpedReactor, and its write side, WritePump: messages go out in order, one StartWrite in
// flight at a time, and Finish once what is queued has gone out. Not thread-safe by itself: the
// owning call makes every call under its own mutex, so StartWrite and Finish are issued under it
// (gRPC never runs a reaction inline from them, so OnWriteDone cannot re-enter while it is held).
#pragma once

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>

#include "server/grpc/grpc_handoff.h"
#include "server/grpc/raw_message.h"
#include "server/serving_state.h"

namespace saturn {

class WritePump {
 public:
  using Reactor = grpc::ServerWriteReactor<grpc::ByteBuffer>;

  // Writes go to `reactor` from now on.
  void Attach(Reactor* reactor) { reactor_ = reactor; }

  // Queues `message`, serialized, and starts it if no write is in flight.
  void Write(const google::protobuf::Message& message) {
    if (drop_ || finish_called_) return;
    SerializeResponse(message, &pending_.emplace_back());
    Pump();
  }
  // Ends the stream with `status` once the queue has drained; the first status given stays.
  void Finish(const grpc::Status& status) {
    if (!finish_.has_value()) finish_ = status;
    Pump();
  }
  // From now on queued messages are dropped (client gone, stream aborted): only the status
  // still goes out.
  void DropMessages() {
    drop_ = true;
    pending_.clear();
  }
  // OnWriteDone. `ok` false: the stream is broken, nothing more is written.
  void WriteDone(bool ok) {
    write_in_flight_ = false;
    if (!ok) DropMessages();
    Pump();
  }
  // OnDone: the reactor is gone.
  void Detach() { reactor_ = nullptr; }

  bool attached() const { return reactor_ != nullptr; }
  bool finishing() const { return finish_.has_value(); }
  bool write_in_flight() const { return write_in_flight_; }

 private:
  void Pump() {
    if (reactor_ == nullptr || write_in_flight_ || finish_called_) return;
    if (!pending_.empty()) {
      writing_ = std::move(pending_.front());
      pending_.pop_front();
      write_in_flight_ = true;
      reactor_->StartWrite(&writing_);
    } else if (finish_.has_value()) {
      finish_called_ = true;
      reactor_->Finish(*finish_);
    }
  }

  Reactor* reactor_ = nullptr;
  std::deque<grpc::ByteBuffer> pending_;  // serialized, not yet written
  grpc::ByteBuffer writing_;              // the write in flight
  bool write_in_flight_ = false;
  bool drop_ = false;
  std::optional<grpc::Status> finish_;
  bool finish_called_ = false;
};

// A server-streaming reactor whose state sits in a shared Call, so that the engine's or the
// timer's callbacks, which hold the Call, never outlive what they touch. gRPC's callbacks go to
// the Call; OnDone detaches the pump (later callbacks find the reactor gone), ends the call's
// ServingState registration outside its lock, and deletes the reactor.
class PumpedReactor : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  struct Call {
    virtual ~Call() = default;
    // OnWriteDone (`ok` false: the stream broke) and OnCancel; each takes `mu` itself.
    virtual void WriteDone(bool ok) = 0;
    virtual void ClientCancelled() = 0;

    std::mutex mu;
    WritePump pump;  // detached once OnDone ran
    ServingState* state = nullptr;
    std::optional<int64_t> call_token;  // ServingState registration
  };

  void OnWriteDone(bool ok) final {
    CalledBackByGrpc(this);
    call_->WriteDone(ok);
  }
  void OnCancel() final {
    CalledBackByGrpc(this);
    call_->ClientCancelled();
  }
  void OnDone() final {
    CalledBackByGrpc(this);
    std::optional<int64_t> token;
    {
      std::lock_guard<std::mutex> lock(call_->mu);
      call_->pump.Detach();
      token = call_->call_token;
    }
    if (token.has_value()) call_->state->EndCall(*token);
    delete this;
  }

 protected:
  explicit PumpedReactor(std::shared_ptr<Call> call) : call_(std::move(call)) {
    call_->pump.Attach(this);
  }
  std::shared_ptr<Call> call_;
};

}  // namespace saturn
