// ShutdownSignals: a self-pipe from the async-signal handler to the watcher thread.
#include "server/shutdown_signals.h"

#include <fcntl.h>
#include <pthread.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <utility>

namespace saturn {
namespace {

int g_pipe[2] = {-1, -1};  // [0] read by the watcher, [1] written by the signal handler

extern "C" void OnShutdownSignal(int signal) {
  const int saved = errno;
  const char byte = static_cast<char>(signal);
  [[maybe_unused]] ssize_t n = write(g_pipe[1], &byte, 1);
  errno = saved;
}

sigset_t ShutdownSet() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  return set;
}

}  // namespace

ShutdownSignals::ShutdownSignals() {
  if (pipe2(g_pipe, O_CLOEXEC) != 0) g_pipe[0] = g_pipe[1] = -1;
  struct sigaction action {};
  action.sa_handler = OnShutdownSignal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
  const sigset_t set = ShutdownSet();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  watcher_ = std::thread([this] { Watch(); });
}

// The handlers stay installed and the pipe open: a signal while the process exits is then
// dropped rather than ending it by the default action.
ShutdownSignals::~ShutdownSignals() {
  SetHandler(nullptr);
  const char stop = 0;
  [[maybe_unused]] ssize_t n = write(g_pipe[1], &stop, 1);
  if (watcher_.joinable()) watcher_.join();
}

void ShutdownSignals::SetHandler(Handler handler) {
  std::lock_guard<std::mutex> lock(mu_);
  handler_ = std::move(handler);
}

const char* ShutdownSignals::Name(int signal) {
  return signal == SIGINT ? "SIGINT" : signal == SIGTERM ? "SIGTERM" : "signal";
}

void ShutdownSignals::Watch() {
  const sigset_t set = ShutdownSet();
  pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
  for (;;) {
    char byte = 0;
    const ssize_t n = read(g_pipe[0], &byte, 1);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0 || byte == 0) break;
    std::lock_guard<std::mutex> lock(mu_);
    ++count_;
    if (handler_) handler_(byte, count_);
  }
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

}  // namespace saturn
