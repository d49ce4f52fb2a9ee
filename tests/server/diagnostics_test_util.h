// Helpers for the diagnostics server tests: a config whose calibration is measured once per
// process (then loaded from the file it was saved to, which keeps each server start short),
// load generators over Generate, and a Diagnostics stub. Header-only, test code only.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "saturn/v1/diagnostics.grpc.pb.h"
#include "server/diag/diagnostics_state.h"
#include "tests/server/server_test_util.h"

namespace saturn::testing {

inline std::string SharedCalibrationPath() {
  return (std::filesystem::temp_directory_path() /
          ("saturn_diag_cal_" + std::to_string(::getpid()) + ".json"))
      .string();
}

// Removes the shared calibration file when the test process exits.
inline struct SharedCalibrationCleanup {
  ~SharedCalibrationCleanup() {
    std::error_code ec;
    std::filesystem::remove(SharedCalibrationPath(), ec);
  }
} shared_calibration_cleanup;

// TinyConfig that loads the shared calibration once a server measured and saved it.
inline ServerConfig DiagConfig() {
  ServerConfig c = TinyConfig();
  const std::string path = SharedCalibrationPath();
  if (std::filesystem::exists(path)) {
    c.calibration = "file";
    c.calibration_file = path;
  } else {
    c.save_calibration = path;
  }
  return c;
}

// Runs `n` Generate streams at once (ids prompts of `prompt_len`, `max_tokens` each) and
// waits for all; returns their results.
inline std::vector<StreamResult> RunConcurrent(v1::Saturn::Stub* stub, int n, int prompt_len,
                                               int max_tokens) {
  std::vector<StreamResult> results(n);
  std::vector<std::thread> threads;
  threads.reserve(n);
  for (int i = 0; i < n; ++i) {
    threads.emplace_back([&, i] {
      std::vector<int> ids;
      ids.reserve(prompt_len);
      for (int j = 0; j < prompt_len; ++j) ids.push_back(3 + (i * 31 + j * 7) % 200);
      results[i] = RunStream(stub, IdsRequest(ids, max_tokens), In(std::chrono::seconds(120)));
    });
  }
  for (auto& t : threads) t.join();
  return results;
}

inline grpc::Status GetDiagnostics(v1::Diagnostics::Stub* stub,
                                   const v1::GetDiagnosticsRequest& req,
                                   v1::DiagnosticsReport* out) {
  grpc::ClientContext ctx;
  ctx.set_deadline(In(std::chrono::seconds(60)));
  return stub->GetDiagnostics(&ctx, req, out);
}

inline grpc::Status SetMaxNumSeqs(v1::Saturn::Stub* stub, int n, v1::EngineOptions* out = nullptr) {
  grpc::ClientContext ctx;
  ctx.set_deadline(In(std::chrono::seconds(60)));
  v1::UpdateEngineOptionsRequest req;
  req.set_max_num_seqs(n);
  v1::UpdateEngineOptionsResponse resp;
  grpc::Status s = stub->UpdateEngineOptions(&ctx, req, &resp);
  if (out != nullptr) *out = resp.options();
  return s;
}

}  // namespace saturn::testing
