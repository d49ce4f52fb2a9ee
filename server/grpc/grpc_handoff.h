// ThreadSanitizer annotations of the one gRPC guarantee Saturn's reactors rely on that TSan
// cannot see (Debian's libgrpc is uninstrumented): a reactor's callbacks (OnWriteDone,
// OnCancel, OnDone) run after the handler that created it has returned it to gRPC, so
// everything its constructor wrote is visible to them. A HandOffToGrpc as the first statement
// of a reactor constructor's body publishes the reactor when the constructor ends (on every
// return path); CalledBackByGrpc(this) first thing in each callback takes that edge. Outside a
// ThreadSanitizer build both compile to nothing. They add no ordering between callbacks, nor
// between a callback and the engine's event thread: those still rely on the reactors' own mutexes,
// which TSan checks (tests/sanitize_thread.sh, docs/HARDENING.md).
#pragma once

#if defined(__SANITIZE_THREAD__)
#define SATURN_TSAN_ANNOTATIONS 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define SATURN_TSAN_ANNOTATIONS 1
#endif
#endif

#ifdef SATURN_TSAN_ANNOTATIONS
extern "C" void __tsan_acquire(void* addr);
extern "C" void __tsan_release(void* addr);
#endif

namespace saturn {

inline void CalledBackByGrpc(const void* reactor) {
#ifdef SATURN_TSAN_ANNOTATIONS
  __tsan_acquire(const_cast<void*>(reactor));
#else
  (void)reactor;
#endif
}

class HandOffToGrpc {
 public:
  explicit HandOffToGrpc(const void* reactor) : reactor_(reactor) {}
  ~HandOffToGrpc() {  // NOLINT(modernize-use-equals-default): not empty in TSan builds
#ifdef SATURN_TSAN_ANNOTATIONS
    __tsan_release(const_cast<void*>(reactor_));
#endif
  }
  HandOffToGrpc(const HandOffToGrpc&) = delete;
  HandOffToGrpc& operator=(const HandOffToGrpc&) = delete;

 private:
  const void* reactor_;
};

}  // namespace saturn
