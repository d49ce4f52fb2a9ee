// ServingState: the call registry behind graceful shutdown.
#include "server/serving_state.h"

#include <chrono>
#include <vector>

namespace saturn {

std::string ServingState::listen_address() const {
  std::lock_guard<std::mutex> lock(mu_);
  return listen_address_;
}

void ServingState::set_listen_address(std::string address) {
  std::lock_guard<std::mutex> lock(mu_);
  listen_address_ = std::move(address);
}

std::optional<int64_t> ServingState::BeginCall(std::function<void()> abort) {
  std::lock_guard<std::mutex> lock(mu_);
  if (draining_) return std::nullopt;
  const int64_t token = next_token_++;
  calls_.emplace(token, std::move(abort));
  return token;
}

void ServingState::EndCall(int64_t token) {
  std::lock_guard<std::mutex> lock(mu_);
  calls_.erase(token);
  // Notified under the lock: a waiter that sees zero calls may destroy this object, which
  // must not happen while this thread still touches it.
  if (calls_.empty()) idle_cv_.notify_all();
}

void ServingState::StartDraining() {
  std::lock_guard<std::mutex> lock(mu_);
  draining_ = true;
}

bool ServingState::draining() const {
  std::lock_guard<std::mutex> lock(mu_);
  return draining_;
}

bool ServingState::WaitIdle(absl::Time deadline) const {
  std::unique_lock<std::mutex> lock(mu_);
  const auto until = absl::ToChronoTime(deadline);
  return idle_cv_.wait_until(lock, until, [this] { return calls_.empty(); });
}

bool ServingState::WaitIdleOrGraceEnd(absl::Time deadline) const {
  std::unique_lock<std::mutex> lock(mu_);
  const auto until = absl::ToChronoTime(deadline);
  idle_cv_.wait_until(lock, until, [this] { return calls_.empty() || grace_ended_; });
  return calls_.empty();
}

void ServingState::EndGrace() {
  std::lock_guard<std::mutex> lock(mu_);
  grace_ended_ = true;
  idle_cv_.notify_all();
}

bool ServingState::grace_ended() const {
  std::lock_guard<std::mutex> lock(mu_);
  return grace_ended_;
}

void ServingState::AbortAll() {
  std::vector<std::function<void()>> hooks;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [token, hook] : calls_) {
      if (hook) hooks.push_back(hook);
    }
  }
  for (auto& hook : hooks) hook();
}

int ServingState::active_calls() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(calls_.size());
}

}  // namespace saturn
