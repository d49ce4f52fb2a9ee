// Tests that compare with Hugging Face `tokenizers` (PyPI) run a Python script that uses it.
// This header finds the interpreter (tests/run_all.sh's venv beside the build, else python3),
// runs a script, and says when the package is missing so the test can skip. Test code only.
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

namespace saturn::hf_test {

inline std::string Python() {
  const std::string venv = std::string(SATURN_BINARY_DIR) + "/pyenv/bin/python3";
  return access(venv.c_str(), X_OK) == 0 ? venv : "python3";
}

// Runs tests/`script` (relative to the source tree) with `args`, its stderr to `err_path`;
// returns the exit code (-1 when it did not exit).
inline int RunScript(const std::string& script, const std::string& args,
                     const std::string& err_path) {
  const std::string cmd =
      Python() + " " + SATURN_SOURCE_DIR + "/tests/" + script + " " + args + " 2> " + err_path;
  const int rc = std::system(cmd.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

// The scripts exit 3 without `tokenizers`; 127 is a missing interpreter.
inline bool Missing(int code) { return code == 3 || code == 127; }

inline std::string MissingMessage() {
  return "Hugging Face `tokenizers` (PyPI) is not available to " + Python() +
         ", so there is nothing to compare with; tests/run_all.sh installs it where pip can "
         "reach PyPI";
}

inline std::string ReadFile(const std::string& path) {
  std::stringstream ss;
  ss << std::ifstream(path).rdbuf();
  return ss.str();
}

}  // namespace saturn::hf_test
