// What every Saturn service shares while the server runs: the engine (null until it is
// loaded and warmed) and its request intake, the drain flag, and the registry of in-flight
// calls that use the engine so that shutdown can wait for them, end the stragglers, and only
// then free the engine.
// Thread-safe. Owned by ServerApp, which outlives every call.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>

#include "absl/time/time.h"
#include "engine/engine.h"
#include "engine/tokenizer/text_tokenizer.h"
#include "server/request_intake.h"
#include "server/server_config.h"

namespace saturn {

class ServingState {
 public:
  explicit ServingState(ServerConfig config) : config_(std::move(config)) {}
  ServingState(const ServingState&) = delete;
  ServingState& operator=(const ServingState&) = delete;

  const ServerConfig& config() const { return config_; }
  // The engine once it is ready; nullptr while loading. Stays valid until every call that
  // BeginCall admitted has ended.
  Engine* engine() const { return engine_.load(std::memory_order_acquire); }
  void set_engine(Engine* engine) { engine_.store(engine, std::memory_order_release); }
  // The address the server is bound to (host:port with the real port).
  std::string listen_address() const;
  void set_listen_address(std::string address);
  // The request intake (request_intake.h: limits, seeds, the text tokenizer), set before the
  // engine is published; the owner (ServerApp) outlives every call. Null while loading.
  RequestIntake* intake() const { return intake_.load(std::memory_order_acquire); }
  void set_intake(RequestIntake* intake) { intake_.store(intake, std::memory_order_release); }
  // The text tokenizer (engine/tokenizer/text_tokenizer.h), null when prompts are token ids
  // only or while loading.
  const TextTokenizer* text_tokenizer() const {
    const RequestIntake* i = intake();
    return i != nullptr ? i->tokenizer() : nullptr;
  }
  bool has_text_tokenizer() const { return text_tokenizer() != nullptr; }

  // Admits a call that uses the engine; nullopt once draining. `abort` (may be empty) is run
  // by AbortAll on shutdown to end the call early; it must not block.
  std::optional<int64_t> BeginCall(std::function<void()> abort);
  void EndCall(int64_t token);

  // Refuses new calls from now on.
  void StartDraining();
  bool draining() const;
  // Waits until no admitted call is left or `deadline`; true when none is left.
  bool WaitIdle(absl::Time deadline) const;
  // The same, but also returns (false, calls left) once EndGrace was called.
  bool WaitIdleOrGraceEnd(absl::Time deadline) const;
  // Ends WaitIdleOrGraceEnd's wait now and for every later call.
  void EndGrace();
  bool grace_ended() const;
  // Runs every live call's abort hook (outside the lock).
  void AbortAll();
  int active_calls() const;

 private:
  const ServerConfig config_;
  std::atomic<Engine*> engine_{nullptr};
  std::atomic<RequestIntake*> intake_{nullptr};

  mutable std::mutex mu_;
  mutable std::condition_variable idle_cv_;
  std::string listen_address_;
  bool draining_ = false;
  bool grace_ended_ = false;
  int64_t next_token_ = 1;
  std::map<int64_t, std::function<void()>> calls_;
};

}  // namespace saturn
