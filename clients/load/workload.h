// What each request asks for: synthetic, seeded prompts with input and output lengths drawn
// from fixed / uniform / normal distributions, or prompts read from a JSONL file. Item i of a
// workload is a pure function of (seed, i), so a duration-bounded run can draw as many items
// as it needs and two runs with the same seed send the same requests. Never talks to a server.
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace saturn::clients {

// A length distribution, written on the command line as
//   "128"                 fixed
//   "uniform:64:256"      uniform integers in [64, 256]
//   "normal:128:32"       normal with mean 128 and standard deviation 32, rounded and
//                         clamped to >= 1
// The longest length a spec or a prompts-file line may ask for, in tokens.
inline constexpr int kMaxLength = 1 << 30;

struct LengthSpec {
  enum class Kind { kFixed, kUniform, kNormal };
  Kind kind = Kind::kFixed;
  double a = 0;  // fixed value, uniform low, or normal mean
  double b = 0;  // uniform high, or normal standard deviation

  int Draw(std::mt19937_64& rng) const;
  std::string ToString() const;
};

// `flag` names the flag in the error ("--input_len: ...").
absl::StatusOr<LengthSpec> ParseLengthSpec(const std::string& flag, const std::string& text);

struct WorkItem {
  std::string prompt_text;  // exactly one of these two is used
  std::vector<int> prompt_token_ids;
  int max_tokens = 16;
};

// Limits of the model the prompts are for (from GetServerInfo).
struct ModelLimits {
  int vocab_size = 256;
  int max_model_len = 512;
  std::vector<int> avoid_token_ids;  // e.g. BOS and EOS, never put in synthetic prompts
  // Synthetic ids are drawn below this (0: vocab_size): for a server whose vocabulary is not
  // known, the byte tokens every vocabulary has.
  int random_id_limit = 0;
};

class Workload {
 public:
  virtual ~Workload() = default;
  // Item i (i >= 0). Thread-compatible: const and deterministic.
  virtual WorkItem Get(int64_t i) const = 0;
  // The lengths in force (after fitting to the model's context), e.g. for the report header.
  virtual std::string Describe() const = 0;
  // How the asked lengths were changed to fit max_model_len and why; "" when they were not.
  virtual std::string Adjustment() const { return ""; }
};

// Synthetic prompts of random token ids: the same `prefix_len` ids first in every prompt
// (drawn once from the seed, as vLLM's --random-prefix-len: a prefix the server's cache can
// share), then the item's own random input. Lengths are clamped so that prefix + input + output
// fits max_model_len (the output length is kept, then the input shortened down to 1, then the
// prefix); Describe() then shows the fixed lengths in force beside the asked ones, and
// Adjustment() says so.
std::unique_ptr<Workload> MakeSyntheticWorkload(LengthSpec input, LengthSpec output,
                                                ModelLimits limits, uint64_t seed,
                                                int prefix_len = 0);

// One JSON object per line; blank lines are skipped. Each object has exactly one of
//   "prompt": "text"                  (a text prompt; needs the server's text tokenizer)
//   "prompt_token_ids": [1, 2, ...]   (token ids sent as-is)
//   "input_len": 128                  (that many random token ids, seeded)
// and optionally "max_tokens" (or its alias "output_len"), an integer >= 1; without it,
// `default_output` is drawn. Items are used in file order and cycled when a run sends more.
// Errors name "file:line" and what is wrong.
absl::StatusOr<std::unique_ptr<Workload>> LoadJsonlWorkload(const std::string& path,
                                                            LengthSpec default_output,
                                                            ModelLimits limits, uint64_t seed);
// Reads and checks a JSONL prompts file before any server is known (so a missing or broken
// file is reported before connecting): every check LoadJsonlWorkload makes except the ids'
// range, which needs the model's vocab_size.
absl::Status CheckJsonlWorkload(const std::string& path);
// The same from text already in memory (`name` stands in for the file name in errors).
absl::StatusOr<std::unique_ptr<Workload>> ParseJsonlWorkload(const std::string& name,
                                                             const std::string& text,
                                                             LengthSpec default_output,
                                                             ModelLimits limits, uint64_t seed);

}  // namespace saturn::clients
