// Shared by the bench tools: their main, the synthetic requests they submit, the engine's step
// records in a time window, and writing the --json result. Header-only, bench code only; never
// used by the server or the tests.
#pragma once

#include <algorithm>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "kernels/base/flags_help.h"

namespace saturn::bench {

// A bench tool's main: parses the command line (--help lists the flags with `usage`; a
// positional argument exits 2), then returns `run`'s exit code.
inline int RunTool(int argc, char** argv, const char* usage, int (*run)()) {
  ParseFlagsOnly(argc, argv, usage);
  return run();
}

// A request of `prompt_len` synthetic tokens (3 + (offset + j * stride) % 250 for token j)
// that generates exactly `max_tokens` tokens (EOS ignored).
inline GenerateRequest SyntheticRequest(int offset, int stride, int prompt_len, int max_tokens) {
  GenerateRequest r;
  for (int j = 0; j < prompt_len; ++j) r.prompt.push_back(3 + (offset + j * stride) % 250);
  r.sampling.max_tokens = max_tokens;
  r.sampling.ignore_eos = true;
  return r;
}

// The engine's steps that began at or after `begin_us` and ended by `end_us`.
inline std::vector<StepRecord> StepsIn(const Engine& engine, double begin_us, double end_us) {
  std::vector<StepRecord> steps = engine.steps().Since(begin_us);
  std::erase_if(steps, [end_us](const StepRecord& r) { return r.end_us > end_us; });
  return steps;
}

// Writes `out` to `path` (nothing when empty); 0, or 1 with a message when it cannot. The
// stream is closed before the check: a full disk (/dev/full) fails only at the flush.
inline int WriteJson(const nlohmann::json& out, const std::string& path) {
  if (path.empty()) return 0;
  std::ofstream f(path);
  f << out.dump(2) << "\n";
  f.close();
  if (!f) {
    std::cerr << "--json: cannot write " << path << "\n";
    return 1;
  }
  std::cerr << "wrote " << path << "\n";
  return 0;
}

// Whether flag --`name`'s value lies in [lo, hi]; prints "--name: must be in [lo, hi], got v"
// when not (NaN is never in range).
template <typename T>
bool FlagInRange(const char* name, T v, T lo, T hi) {
  if (v >= lo && v <= hi) return true;
  std::cerr << "--" << name << ": must be in [" << lo << ", " << hi << "], got " << v << "\n";
  return false;
}

}  // namespace saturn::bench
