// --help for every Saturn binary: lists the flags Saturn's own sources define (not Abseil's)
// with their help text and defaults, and exits 0. Abseil 20220623's own --help prints only the
// flags of a file named after the binary ("No flags matched." for saturn-server, whose flags
// live in server/main.cc) and exits 1. Header-only so that the server, the clients and the
// benchmarks share it without a library; used by each main instead of absl::ParseCommandLine.
#pragma once

#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <string>
#include <string_view>
#include <vector>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"

namespace saturn {

// Whether a flag defined in `filename` (its __FILE__) is one of Saturn's: a file under one
// of Saturn's source folders, never one of Abseil's.
inline bool IsSaturnFlagFile(absl::string_view filename) {
  if (absl::StrContains(filename, "absl/")) return false;
  for (const char* dir : {"server/", "clients/", "bench/", "engine/", "kernels/"}) {
    if (absl::StartsWith(filename, dir) || absl::StrContains(filename, std::string("/") + dir)) {
      return true;
    }
  }
  return false;
}

// The --help text: the usage message, then each Saturn flag sorted by name.
inline std::string SaturnFlagsHelp() {
  std::vector<const absl::CommandLineFlag*> flags;
  for (const auto& [name, flag] : absl::GetAllFlags()) {
    if (IsSaturnFlagFile(flag->Filename())) flags.push_back(flag);
  }
  std::sort(flags.begin(), flags.end(),
            [](const auto* a, const auto* b) { return a->Name() < b->Name(); });
  std::string out(absl::ProgramUsageMessage());
  out += "\n\nflags:\n";
  for (const absl::CommandLineFlag* f : flags) {
    out += "  --" + std::string(f->Name()) + " (" + f->Help() + ")\n";
    out += "      default: " + (f->DefaultValue().empty() ? "\"\"" : f->DefaultValue()) + "\n";
  }
  out += "\n--helpfull lists Abseil's flags too.\n";
  return out;
}

// Sets the usage message, answers --help / -h / --helpshort (stdout, exit 0), and otherwise
// parses the command line as absl::ParseCommandLine does, returning the positional arguments.
inline std::vector<char*> ParseCommandLineWithHelp(int argc, char** argv, const char* usage) {
  absl::SetProgramUsageMessage(usage);
  absl::FlagsUsageConfig config;
  config.contains_helpshort_flags = IsSaturnFlagFile;
  config.contains_help_flags = IsSaturnFlagFile;
  absl::SetFlagsUsageConfig(config);
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a == "--") break;
    if (a == "--help" || a == "-help" || a == "-h" || a == "--helpshort" || a == "-helpshort") {
      std::cout << SaturnFlagsHelp() << std::flush;
      std::exit(0);
    }
  }
  return absl::ParseCommandLine(argc, argv);
}

// As ParseCommandLineWithHelp, for a tool that takes flags only: a positional argument is
// refused, naming it (exit 2). "--skip_tokenizer_init false" sets the flag to true and leaves
// "false" behind, so ignoring leftovers silently did the opposite of what was asked.
inline void ParseFlagsOnly(int argc, char** argv, const char* usage) {
  const std::vector<char*> rest = ParseCommandLineWithHelp(argc, argv, usage);
  if (rest.size() > 1) {
    std::string_view tool = argc > 0 ? argv[0] : "saturn";
    tool = tool.substr(tool.rfind('/') == std::string_view::npos ? 0 : tool.rfind('/') + 1);
    std::cerr << tool << ": unexpected argument \"" << rest[1]
              << "\" (flags only; a flag's value goes after '=', as in --flag=false)" << std::endl;
    std::exit(2);
  }
}

}  // namespace saturn
