// ShutdownSignals: SIGINT and SIGTERM become calls of one handler on one watcher thread,
// whichever thread the kernel delivers them to and whenever they come (before the model is
// loaded, during the drain, ...), so no signal ever ends the process by its default action.
//
// Blocking the signals in main is not enough: threads that libraries start before main
// (OpenBLAS's pool, from its library constructor) do not block them, and a signal delivered
// there would kill the process. So the signals get a real handler, which only writes the
// signal number to a pipe (async-signal-safe); the watcher thread reads the pipe and calls
// the handler set with SetHandler, with a count (1 for the first signal, 2 for the second...).
// The signals are also blocked in the constructing thread, so threads started later
// inherit the block and keep their system calls free of EINTR; the watcher alone unblocks
// them. One instance per process.
#pragma once

#include <functional>
#include <mutex>
#include <thread>

namespace saturn {

class ShutdownSignals {
 public:
  using Handler = std::function<void(int signal, int count)>;

  // Installs the handlers and starts the watcher. Construct it first thing in main.
  ShutdownSignals();
  ~ShutdownSignals();  // stops the watcher; later signals are dropped
  ShutdownSignals(const ShutdownSignals&) = delete;
  ShutdownSignals& operator=(const ShutdownSignals&) = delete;

  // Replaces the handler (may be empty: signals are counted and dropped). Once it returns,
  // the previous handler is not running and never runs again.
  void SetHandler(Handler handler);

  static const char* Name(int signal);

 private:
  void Watch();

  std::mutex mu_;  // held while the handler runs
  Handler handler_;
  int count_ = 0;
  std::thread watcher_;
};

}  // namespace saturn
