// WatchReactor: report pacing on the timer thread; all shared state in Call behind one mutex.
// StartWrite and Finish are issued under it (gRPC does not run reactions inline from them).
#include "server/watch_reactor.h"

#include <algorithm>
#include <chrono>
#include <mutex>
#include <optional>
#include <utility>

#include "server/diagnostics_request.h"
#include "server/grpc_handoff.h"
#include "server/raw_message.h"
#include "server/reject_reactor.h"

namespace saturn {
namespace {

// Longest sleep between Ticks: bounds how long a draining server waits for a watch to end.
constexpr auto kPoll = std::chrono::milliseconds(200);

}  // namespace

struct WatchReactor::Call {
  std::mutex mu;
  WatchReactor* reactor = nullptr;  // null once OnDone ran
  ServingState* state = nullptr;
  DiagnosticsState* diag = nullptr;
  TimerThread* timer = nullptr;
  double window_seconds = 0;
  std::chrono::milliseconds interval{0};
  bool include_json = false;
  std::optional<int64_t> call_token;
  TimerThread::Clock::time_point next_report;

  grpc::ByteBuffer writing;  // the report in flight, serialized
  bool write_in_flight = false;
  std::optional<grpc::Status> finish;
  bool finish_called = false;

  // Finishes now, or after the write in flight. Requires mu.
  void FinishLocked(const grpc::Status& status) {
    if (!finish.has_value()) finish = status;
    if (reactor == nullptr || write_in_flight || finish_called) return;
    finish_called = true;
    reactor->Finish(*finish);
  }

  // Timer thread.
  void Tick(const std::shared_ptr<Call>& self) {
    const auto now = TimerThread::Clock::now();
    bool due = false;
    {
      std::lock_guard<std::mutex> lock(mu);
      if (reactor == nullptr || finish.has_value()) return;  // ending: no more Ticks
      due = now >= next_report && !write_in_flight;
    }
    if (due) {
      std::optional<int64_t> token = state->BeginCall(nullptr);
      Engine* engine = token.has_value() ? state->engine() : nullptr;
      if (engine == nullptr) {
        if (token.has_value()) state->EndCall(*token);
        std::lock_guard<std::mutex> lock(mu);
        FinishLocked(grpc::Status(grpc::StatusCode::UNAVAILABLE, "server shutting down"));
        return;
      }
      v1::DiagnosticsReport report;
      const double now_us = NowUs();
      FillReport(*engine, diag, DiagWindow{now_us - window_seconds * 1e6, now_us},
                 ReportContent{include_json}, &report);
      state->EndCall(*token);
      std::lock_guard<std::mutex> lock(mu);
      if (reactor == nullptr || finish.has_value()) return;
      SerializeResponse(report, &writing);
      write_in_flight = true;
      reactor->StartWrite(&writing);
      next_report = std::max(next_report + interval, now);
    } else if (state->draining()) {
      std::lock_guard<std::mutex> lock(mu);
      FinishLocked(grpc::Status(grpc::StatusCode::UNAVAILABLE, "server shutting down"));
      return;
    }
    const auto next = std::min(next_report, TimerThread::Clock::now() + kPoll);
    timer->Post(next, [self] { self->Tick(self); });
  }

  // ServingState::AbortAll (shutdown after the grace period).
  void Abort() {
    std::lock_guard<std::mutex> lock(mu);
    FinishLocked(grpc::Status(grpc::StatusCode::UNAVAILABLE, "server shutting down"));
  }
};

grpc::ServerWriteReactor<grpc::ByteBuffer>* RejectWatch(const grpc::Status& status) {
  return new RejectReactor<grpc::ByteBuffer>(status);
}

WatchReactor::WatchReactor(ServingState* state, DiagnosticsState* diag, TimerThread* timer,
                           double window_seconds, int interval_ms, bool include_json,
                           std::shared_ptr<void> slot)
    : call_(std::make_shared<Call>()), slot_(std::move(slot)) {
  HandOffToGrpc publish(this);
  Call& c = *call_;
  c.reactor = this;
  c.state = state;
  c.diag = diag;
  c.timer = timer;
  c.window_seconds = window_seconds;
  c.interval = std::chrono::milliseconds(interval_ms);
  c.include_json = include_json;
  c.next_report = TimerThread::Clock::now();
  std::weak_ptr<Call> weak = call_;
  c.call_token = state->BeginCall([weak] {
    if (auto call = weak.lock()) call->Abort();
  });
  std::lock_guard<std::mutex> lock(c.mu);
  if (!c.call_token.has_value()) {
    c.FinishLocked(grpc::Status(grpc::StatusCode::UNAVAILABLE, "server shutting down"));
    return;
  }
  std::shared_ptr<Call> self = call_;
  if (!timer->Post(c.next_report, [self] { self->Tick(self); })) {
    c.FinishLocked(grpc::Status(grpc::StatusCode::UNAVAILABLE, "server shutting down"));
  }
}

void WatchReactor::OnWriteDone(bool ok) {
  CalledBackByGrpc(this);
  std::lock_guard<std::mutex> lock(call_->mu);
  call_->write_in_flight = false;
  if (!ok) {
    call_->FinishLocked(grpc::Status(grpc::StatusCode::CANCELLED, "stream broken"));
  } else if (call_->finish.has_value()) {
    call_->FinishLocked(*call_->finish);
  }
}

void WatchReactor::OnCancel() {
  CalledBackByGrpc(this);
  std::lock_guard<std::mutex> lock(call_->mu);
  call_->FinishLocked(grpc::Status(grpc::StatusCode::CANCELLED, "cancelled by the client"));
}

void WatchReactor::OnDone() {
  CalledBackByGrpc(this);
  EndReactorCall(*call_);
  delete this;
}

}  // namespace saturn
