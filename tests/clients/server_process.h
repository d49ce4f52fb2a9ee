// Test helper for the end-to-end client tests: starts the built saturn-server (tiny model, CPU
// backend) on a loopback port the kernel picks, stops it, runs a built client tool with its
// stdout and stderr captured, and is the base of the suites that share one server.
// Header-only, test code only; POSIX (fork, exec, waitpid).
#pragma once

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace saturn::clients::testing {

inline const std::string kServerBinary = std::string(SATURN_BINARY_DIR) + "/server/saturn-server";
inline const std::string kLoadBinary = std::string(SATURN_BINARY_DIR) + "/clients/saturn-load";
inline const std::string kDiagBinary = std::string(SATURN_BINARY_DIR) + "/clients/saturn-diag";

inline std::string ReadFile(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// A folder of this process's own (`prefix` + pid under the test temp dir), so that tests run
// in parallel do not share files.
inline std::string MakeProcessDir(const std::string& prefix) {
  std::string d = ::testing::TempDir() + "/" + prefix + std::to_string(getpid());
  mkdir(d.c_str(), 0755);
  return d;
}

struct Spawned {
  pid_t pid = -1;
  std::string address;
};

// Starts saturn-server on 127.0.0.1:0 (with `extra` flags after the usual ones, e.g. the
// security flags) and waits (up to 120 s) for its "ready" line.
inline Spawned StartServer(const std::string& log, const std::vector<std::string>& extra = {}) {
  std::vector<std::string> args = {
      kServerBinary, "--model=tiny", "--backend=cpu", "--threads=1", "--listen=127.0.0.1:0",
      "--max_model_len=512", "--kv_cache_mb=32", "--shutdown_grace=2s",
      // Shorter calibration trials, as the in-process server tests use (server_test_util.h):
      // each test starts its own server (measured under ASan: 8.6 s to ready against 11.9 s).
      "--calibration=quick"};
  args.insert(args.end(), extra.begin(), extra.end());
  std::vector<char*> argv;
  argv.reserve(args.size() + 1);
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  // A log left by an earlier process with the same pid (the folder is named by pid, and pids
  // wrap between CI's builds) would show its stale address as ready.
  std::remove(log.c_str());
  Spawned s;
  s.pid = fork();
  if (s.pid == 0) {
    FILE* f = freopen(log.c_str(), "w", stderr);
    (void)f;
    execv(kServerBinary.c_str(), argv.data());
    _exit(127);
  }
  for (int i = 0; i < 1200; ++i) {
    const std::string text = ReadFile(log);
    const size_t ready = text.find("(SERVING)");
    const size_t at = text.find("listening on ");
    if (ready != std::string::npos && at != std::string::npos) {
      s.address = text.substr(at + 13, text.find(' ', at + 13) - (at + 13));
      return s;
    }
    int status = 0;
    if (waitpid(s.pid, &status, WNOHANG) == s.pid) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ADD_FAILURE() << "saturn-server did not start; its log:\n" << ReadFile(log);
  return s;
}

// SIGTERM, then waits for it to exit. Null or never started: nothing to do.
inline void StopServer(const Spawned* server) {
  if (server != nullptr && server->pid > 0) {
    kill(server->pid, SIGTERM);
    int status = 0;
    waitpid(server->pid, &status, 0);
  }
}

struct ToolRun {
  int code = -1;
  std::string out, err;
};

// Runs `binary args` through the shell, stdout and stderr to `dir`/`stem`.out and .err.
inline ToolRun RunTool(const std::string& binary, const std::string& args, const std::string& dir,
                       const std::string& stem) {
  const std::string out = dir + "/" + stem + ".out", err = dir + "/" + stem + ".err";
  const std::string cmd = binary + " " + args + " >" + out + " 2>" + err;
  const int rc = std::system(cmd.c_str());
  ToolRun r;
  r.code = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  r.out = ReadFile(out);
  r.err = ReadFile(err);
  return r;
}

// A suite whose tests share one saturn-server: the suite's SetUpTestSuite calls
// StartSharedServer, each test starts only once the server is serving, and the server is
// stopped after the suite.
class SharedServerSuite : public ::testing::Test {
 protected:
  // Checks that saturn-server and the client tool `tool` (`name`: its target) are built,
  // then starts the server with its log in `dir`. server_ stays null when a check fails.
  static void StartSharedServer(const std::string& tool, const std::string& name,
                                const std::string& dir) {
    ASSERT_EQ(access(kServerBinary.c_str(), X_OK), 0)
        << "build the saturn-server target: " << kServerBinary;
    ASSERT_EQ(access(tool.c_str(), X_OK), 0) << "build the " << name << " target: " << tool;
    server_ = new Spawned(StartServer(dir + "/saturn-server.log"));
  }
  static void TearDownTestSuite() {
    StopServer(server_);
    delete server_;
    server_ = nullptr;
  }
  void SetUp() override {
    ASSERT_NE(server_, nullptr) << "the suite's set-up failed (see above)";
    ASSERT_FALSE(server_->address.empty());
  }

  static inline Spawned* server_ = nullptr;
};

}  // namespace saturn::clients::testing
