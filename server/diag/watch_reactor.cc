// WatchReactor: report pacing on the timer thread, writes through the stream's WritePump
// (server/grpc/write_pump.h); all shared state in Call behind one mutex.
#include "server/diag/watch_reactor.h"

#include <algorithm>
#include <chrono>
#include <mutex>
#include <optional>
#include <utility>

#include "server/diag/diagnostics_request.h"
#include "server/grpc/grpc_handoff.h"
#include "server/grpc/raw_message.h"
#include "server/grpc/reject_reactor.h"
#include "server/grpc/write_pump.h"

namespace saturn {
namespace {

// Longest sleep between Ticks: bounds how long a draining server waits for a watch to end.
constexpr auto kPoll = std::chrono::milliseconds(200);

}  // namespace

struct WatchReactor::Call final : PumpedReactor::Call {
  DiagnosticsState* diag = nullptr;
  TimerThread* timer = nullptr;
  double window_seconds = 0;
  std::chrono::milliseconds interval{0};
  bool include_json = false;
  TimerThread::Clock::time_point next_report;

  // Timer thread.
  void Tick(const std::shared_ptr<Call>& self) {
    const auto now = TimerThread::Clock::now();
    bool due = false;
    {
      std::lock_guard<std::mutex> lock(mu);
      if (!pump.attached() || pump.finishing()) return;  // ending: no more Ticks
      due = now >= next_report && !pump.write_in_flight();
    }
    if (due) {
      std::optional<int64_t> token = state->BeginCall(nullptr);
      Engine* engine = token.has_value() ? state->engine() : nullptr;
      if (engine == nullptr) {
        if (token.has_value()) state->EndCall(*token);
        std::lock_guard<std::mutex> lock(mu);
        pump.Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, "server shutting down"));
        return;
      }
      v1::DiagnosticsReport report;
      const double now_us = NowUs();
      FillReport(*engine, diag, DiagWindow{now_us - window_seconds * 1e6, now_us},
                 ReportContent{include_json}, &report);
      state->EndCall(*token);
      std::lock_guard<std::mutex> lock(mu);
      if (!pump.attached() || pump.finishing()) return;
      pump.Write(report);
      next_report = std::max(next_report + interval, now);
    } else if (state->draining()) {
      std::lock_guard<std::mutex> lock(mu);
      pump.Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, "server shutting down"));
      return;
    }
    const auto next = std::min(next_report, TimerThread::Clock::now() + kPoll);
    timer->Post(next, [self] { self->Tick(self); });
  }

  // ServingState::AbortAll (shutdown after the grace period).
  void Abort() {
    std::lock_guard<std::mutex> lock(mu);
    pump.Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, "server shutting down"));
  }

  void WriteDone(bool ok) override {
    std::lock_guard<std::mutex> lock(mu);
    if (!ok) pump.Finish(grpc::Status(grpc::StatusCode::CANCELLED, "stream broken"));
    pump.WriteDone(ok);
  }

  void ClientCancelled() override {
    std::lock_guard<std::mutex> lock(mu);
    pump.Finish(grpc::Status(grpc::StatusCode::CANCELLED, "cancelled by the client"));
  }
};

grpc::ServerWriteReactor<grpc::ByteBuffer>* RejectWatch(const grpc::Status& status) {
  return new RejectReactor<grpc::ByteBuffer>(status);
}

WatchReactor::WatchReactor(std::shared_ptr<Call> call, std::shared_ptr<void> slot)
    : PumpedReactor(std::move(call)), slot_(std::move(slot)) {}

WatchReactor::WatchReactor(ServingState* state, DiagnosticsState* diag, TimerThread* timer,
                           double window_seconds, int interval_ms, bool include_json,
                           std::shared_ptr<void> slot)
    : WatchReactor(std::make_shared<Call>(), std::move(slot)) {
  HandOffToGrpc publish(this);
  Call& c = static_cast<Call&>(*call_);
  c.state = state;
  c.diag = diag;
  c.timer = timer;
  c.window_seconds = window_seconds;
  c.interval = std::chrono::milliseconds(interval_ms);
  c.include_json = include_json;
  c.next_report = TimerThread::Clock::now();
  std::weak_ptr<PumpedReactor::Call> weak = call_;
  c.call_token = state->BeginCall([weak] {
    if (auto call = weak.lock()) static_cast<Call&>(*call).Abort();
  });
  std::lock_guard<std::mutex> lock(c.mu);
  if (!c.call_token.has_value()) {
    c.pump.Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, "server shutting down"));
    return;
  }
  std::shared_ptr<Call> self = std::static_pointer_cast<Call>(call_);
  if (!timer->Post(c.next_report, [self] { self->Tick(self); })) {
    c.pump.Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, "server shutting down"));
  }
}

}  // namespace saturn
