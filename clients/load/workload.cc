// Synthetic and JSONL workloads (see workload.h). Item i draws from its own generator seeded
// by (seed, i), so items do not depend on the order or thread in which they are requested.
#include "clients/load/workload.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "kernels/base/json_depth.h"
#include "kernels/base/read_file.h"
#include "nlohmann/json.hpp"

namespace saturn::clients {
namespace {

std::mt19937_64 ItemRng(uint64_t seed, int64_t i, uint64_t stream) {
  // splitmix64-style mixing so neighbouring (seed, i) give unrelated generators.
  uint64_t x =
      seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(i) + stream * 0xD1B54A32D192ED03ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  x ^= x >> 31;
  return std::mt19937_64(x);
}

std::vector<int> RandomTokens(std::mt19937_64& rng, int n, const ModelLimits& limits) {
  const int limit = limits.random_id_limit > 0 ? std::min(limits.random_id_limit, limits.vocab_size)
                                               : limits.vocab_size;
  std::uniform_int_distribution<int> dist(0, std::max(0, limit - 1));
  std::vector<int> ids;
  ids.reserve(n);
  while (static_cast<int>(ids.size()) < n) {
    const int id = dist(rng);
    if (std::find(limits.avoid_token_ids.begin(), limits.avoid_token_ids.end(), id) ==
            limits.avoid_token_ids.end() ||
        static_cast<int>(limits.avoid_token_ids.size()) >= limit) {
      ids.push_back(id);
    }
  }
  return ids;
}

// The generator streams of ItemRng: a synthetic item's, a JSONL item's, the shared prefix's.
constexpr uint64_t kSyntheticStream = 0, kJsonlStream = 1, kPrefixStream = 2;

// Output kept, then the input shortened (down to 1), then the prefix: output and input >= 1,
// prefix >= 0, prefix + input + output <= max_model_len.
void FitLengths(int max_model_len, int* prefix, int* input, int* output) {
  *output = std::clamp(*output, 1, std::max(1, max_model_len - 1));
  *input = std::clamp(*input, 1, std::max(1, max_model_len - *output - *prefix));
  *prefix = std::clamp(*prefix, 0, std::max(0, max_model_len - *output - *input));
}

// The largest length a spec draws in practice (a normal's mean + 4 sd).
double UpperBound(const LengthSpec& l) {
  switch (l.kind) {
    case LengthSpec::Kind::kFixed:
      return l.a;
    case LengthSpec::Kind::kUniform:
      return l.b;
    case LengthSpec::Kind::kNormal:
      return l.a + 4 * l.b;
  }
  return l.a;
}

class SyntheticWorkload : public Workload {
 public:
  SyntheticWorkload(LengthSpec in, LengthSpec out, ModelLimits limits, uint64_t seed,
                    int prefix_len)
      : in_(in), out_(out), limits_(std::move(limits)), seed_(seed), prefix_len_(prefix_len) {
    // Drawn once; no fitted prefix is longer than the context.
    std::mt19937_64 rng = ItemRng(seed_, 0, kPrefixStream);
    prefix_ = RandomTokens(rng, std::min(prefix_len_, limits_.max_model_len), limits_);
  }

  WorkItem Get(int64_t i) const override {
    std::mt19937_64 rng = ItemRng(seed_, i, kSyntheticStream);
    int prefix = prefix_len_, input = in_.Draw(rng), output = out_.Draw(rng);
    FitLengths(limits_.max_model_len, &prefix, &input, &output);
    WorkItem item;
    item.prompt_token_ids.assign(prefix_.begin(), prefix_.begin() + prefix);
    const std::vector<int> own = RandomTokens(rng, input, limits_);
    item.prompt_token_ids.insert(item.prompt_token_ids.end(), own.begin(), own.end());
    item.max_tokens = output;
    return item;
  }
  std::string Describe() const override {
    int prefix = 0, input = 0, output = 0;
    const bool fixed = FittedFixed(&prefix, &input, &output);
    // A fixed length in force that differs from the asked one shows both.
    auto show = [fixed](const std::string& asked, double asked_value, int used) {
      return !fixed || static_cast<double>(used) == asked_value
                 ? asked
                 : absl::StrCat(used, " (asked ", asked, ")");
    };
    return absl::StrCat(
        "synthetic ",
        prefix_len_ > 0
            ? absl::StrCat("prefix_len=", show(absl::StrCat(prefix_len_), prefix_len_, prefix), " ")
            : "",
        "input_len=", show(in_.ToString(), in_.a, input),
        " output_len=", show(out_.ToString(), out_.a, output), " seed=", seed_);
  }
  std::string Adjustment() const override {
    const int limit = limits_.max_model_len;
    const std::string asked =
        absl::StrCat(prefix_len_ > 0 ? absl::StrCat("--prefix_len ", prefix_len_, " + ") : "",
                     "--input_len ", in_.ToString(), " + --output_len ", out_.ToString());
    int prefix = 0, input = 0, output = 0;
    if (FittedFixed(&prefix, &input, &output)) {
      if (prefix == prefix_len_ && static_cast<double>(input) == in_.a &&
          static_cast<double>(output) == out_.a) {
        return "";
      }
      return absl::StrCat(asked, " does not fit the model's context (max_model_len ", limit,
                          "), so every request uses ",
                          prefix_len_ > 0 ? absl::StrCat("prefix_len ", prefix, ", ") : "",
                          "input_len ", input, " and output_len ", output,
                          prefix_len_ > 0
                              ? " (the output is kept, the input shortened, then the shared prefix)"
                              : " (the output is kept, the prompt shortened)");
    }
    if (prefix_len_ + UpperBound(in_) + UpperBound(out_) <= limit) return "";
    return absl::StrCat("draws of ", asked, " can exceed the model's context (max_model_len ",
                        limit, "); such requests keep their output length (at most ", limit - 1,
                        ") and get a shorter prompt");
  }

 private:
  // For fixed lengths: the lengths in force.
  bool FittedFixed(int* prefix, int* input, int* output) const {
    *prefix = prefix_len_;
    if (in_.kind != LengthSpec::Kind::kFixed || out_.kind != LengthSpec::Kind::kFixed) {
      return false;
    }
    *input = static_cast<int>(in_.a);
    *output = static_cast<int>(out_.a);
    FitLengths(limits_.max_model_len, prefix, input, output);
    return true;
  }
  LengthSpec in_, out_;
  ModelLimits limits_;
  uint64_t seed_;
  int prefix_len_;
  std::vector<int> prefix_;  // the shared prefix's ids (at most max_model_len of them)
};

// A JSONL line, parsed; input_len > 0 means "random ids of that length".
struct JsonlItem {
  std::string text;
  std::vector<int> ids;
  int input_len = 0;
  int max_tokens = 0;  // 0: draw from the default
};

class JsonlWorkload : public Workload {
 public:
  JsonlWorkload(std::string name, std::vector<JsonlItem> items, LengthSpec out, ModelLimits limits,
                uint64_t seed)
      : name_(std::move(name)),
        items_(std::move(items)),
        out_(out),
        limits_(std::move(limits)),
        seed_(seed) {}

  WorkItem Get(int64_t i) const override {
    const JsonlItem& src = items_[static_cast<size_t>(i) % items_.size()];
    std::mt19937_64 rng = ItemRng(seed_, i, kJsonlStream);
    WorkItem item;
    item.max_tokens = src.max_tokens > 0 ? src.max_tokens : out_.Draw(rng);
    if (src.input_len > 0) {
      int no_prefix = 0, input = src.input_len;
      FitLengths(limits_.max_model_len, &no_prefix, &input, &item.max_tokens);
      item.prompt_token_ids = RandomTokens(rng, input, limits_);
    } else {
      item.prompt_text = src.text;
      item.prompt_token_ids = src.ids;
    }
    return item;
  }
  std::string Describe() const override {
    return absl::StrCat("jsonl ", name_, " (", items_.size(), " prompts)");
  }
  std::string Adjustment() const override {
    int64_t over = 0;
    for (const JsonlItem& it : items_) {
      const double out = it.max_tokens > 0 ? it.max_tokens : UpperBound(out_);
      if (it.input_len > 0 && it.input_len + out > limits_.max_model_len) ++over;
    }
    if (over == 0) return "";
    return absl::StrCat(over, " of ", items_.size(), " prompts ask for input_len + max_tokens ",
                        "over the model's context (max_model_len ", limits_.max_model_len,
                        "); they keep their output length and get a shorter prompt");
  }

 private:
  std::string name_;
  std::vector<JsonlItem> items_;
  LengthSpec out_;
  ModelLimits limits_;
  uint64_t seed_;
};

absl::Status LineError(const std::string& name, int line, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(name, ":", line, ": ", what));
}

std::optional<int> PositiveInt(const nlohmann::json& v) {
  if (!v.is_number_integer()) return std::nullopt;
  const int64_t x = v.get<int64_t>();
  if (x < 1 || x > kMaxLength) return std::nullopt;
  return static_cast<int>(x);
}

absl::StatusOr<JsonlItem> ParseLine(const std::string& name, int line_no, const std::string& line,
                                    const ModelLimits& limits) {
  if (JsonNestingDepth(line) > kMaxFileJsonDepth) {
    return LineError(name, line_no, absl::StrCat("nests deeper than ", kMaxFileJsonDepth));
  }
  nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return LineError(name, line_no, "not valid JSON");
  if (!j.is_object()) return LineError(name, line_no, "expected a JSON object");
  JsonlItem item;
  int sources = 0;
  for (auto& [key, v] : j.items()) {
    if (key == "prompt") {
      ++sources;
      if (!v.is_string()) return LineError(name, line_no, "\"prompt\" must be a string");
      item.text = v.get<std::string>();
      if (item.text.empty()) return LineError(name, line_no, "\"prompt\" is empty");
    } else if (key == "prompt_token_ids") {
      ++sources;
      if (!v.is_array() || v.empty()) {
        return LineError(name, line_no, "\"prompt_token_ids\" must be a non-empty array");
      }
      for (size_t k = 0; k < v.size(); ++k) {
        // vocab_size 0: not known yet (CheckJsonlWorkload, before connecting).
        const int64_t bound = limits.vocab_size > 0 ? limits.vocab_size : int64_t{INT32_MAX} + 1;
        if (!v[k].is_number_integer() || v[k].get<int64_t>() < 0 || v[k].get<int64_t>() >= bound) {
          return LineError(
              name, line_no,
              limits.vocab_size > 0
                  ? absl::StrCat("\"prompt_token_ids\"[", k, "] must be an integer in [0, ",
                                 limits.vocab_size, ") (the model's vocab_size)")
                  : absl::StrCat("\"prompt_token_ids\"[", k,
                                 "] must be a token id (an integer >= 0)"));
        }
        item.ids.push_back(v[k].get<int>());
      }
    } else if (key == "input_len") {
      ++sources;
      std::optional<int> n = PositiveInt(v);
      if (!n) {
        return LineError(name, line_no,
                         absl::StrCat("\"input_len\" must be an integer in [1, ", kMaxLength, "]"));
      }
      item.input_len = *n;
    } else if (key == "max_tokens" || key == "output_len") {
      std::optional<int> n = PositiveInt(v);
      if (!n)
        return LineError(name, line_no,
                         absl::StrCat("\"", key, "\" must be an integer in [1, ", kMaxLength, "]"));
      item.max_tokens = *n;
    } else {
      return LineError(name, line_no,
                       absl::StrCat("unknown key \"", key,
                                    "\" (expected prompt, prompt_token_ids or input_len, and "
                                    "optionally max_tokens / output_len)"));
    }
  }
  if (sources != 1) {
    return LineError(name, line_no,
                     "needs exactly one of \"prompt\", \"prompt_token_ids\", \"input_len\"");
  }
  return item;
}

}  // namespace

int LengthSpec::Draw(std::mt19937_64& rng) const {
  switch (kind) {
    case Kind::kFixed:
      return static_cast<int>(a);
    case Kind::kUniform:
      return std::uniform_int_distribution<int>(static_cast<int>(a), static_cast<int>(b))(rng);
    case Kind::kNormal: {
      // Clamped before the cast: a draw past int's range wrapped to a negative, then 1.
      const double x = std::normal_distribution<double>(a, b)(rng);
      return static_cast<int>(std::lround(std::clamp(x, 1.0, double{kMaxLength})));
    }
  }
  return 1;
}

std::string LengthSpec::ToString() const {
  switch (kind) {
    case Kind::kFixed:
      return absl::StrCat(static_cast<int>(a));
    case Kind::kUniform:
      return absl::StrCat("uniform:", static_cast<int>(a), ":", static_cast<int>(b));
    case Kind::kNormal:
      return absl::StrCat("normal:", a, ":", b);
  }
  return "";
}

absl::StatusOr<LengthSpec> ParseLengthSpec(const std::string& flag, const std::string& text) {
  const std::string usage = absl::StrCat(
      flag, ": expected N, uniform:LOW:HIGH or normal:MEAN:STDDEV (lengths >= 1), got \"", text,
      "\"");
  std::vector<std::string> parts = absl::StrSplit(text, ':');
  LengthSpec s;
  if (parts.size() == 1) {
    int n = 0;
    if (!absl::SimpleAtoi(parts[0], &n) || n < 1 || n > kMaxLength) {
      return absl::InvalidArgumentError(absl::StrCat(usage, " (at most ", kMaxLength, ")"));
    }
    s.a = n;
    return s;
  }
  if (parts.size() != 3) return absl::InvalidArgumentError(usage);
  if (parts[0] == "uniform") {
    int lo = 0, hi = 0;
    if (!absl::SimpleAtoi(parts[1], &lo) || !absl::SimpleAtoi(parts[2], &hi) || lo < 1 || hi < lo ||
        hi > kMaxLength) {
      return absl::InvalidArgumentError(
          absl::StrCat(usage, " (uniform needs 1 <= LOW <= HIGH <= ", kMaxLength, ")"));
    }
    s.kind = LengthSpec::Kind::kUniform;
    s.a = lo;
    s.b = hi;
    return s;
  }
  if (parts[0] == "normal") {
    double mean = 0, sd = 0;
    if (!absl::SimpleAtod(parts[1], &mean) || !absl::SimpleAtod(parts[2], &sd) || !(mean >= 1) ||
        !(sd >= 0) || !(mean <= kMaxLength) || !(sd <= kMaxLength)) {
      return absl::InvalidArgumentError(absl::StrCat(usage,
                                                     " (normal needs 1 <= MEAN <= ", kMaxLength,
                                                     " and 0 <= STDDEV <= ", kMaxLength, ")"));
    }
    s.kind = LengthSpec::Kind::kNormal;
    s.a = mean;
    s.b = sd;
    return s;
  }
  return absl::InvalidArgumentError(usage);
}

std::unique_ptr<Workload> MakeSyntheticWorkload(LengthSpec input, LengthSpec output,
                                                ModelLimits limits, uint64_t seed, int prefix_len) {
  return std::make_unique<SyntheticWorkload>(input, output, std::move(limits), seed, prefix_len);
}

absl::StatusOr<std::unique_ptr<Workload>> ParseJsonlWorkload(const std::string& name,
                                                             const std::string& text,
                                                             LengthSpec default_output,
                                                             ModelLimits limits, uint64_t seed) {
  std::vector<JsonlItem> items;
  std::istringstream in(text);
  std::string line;
  int line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    absl::StatusOr<JsonlItem> item = ParseLine(name, line_no, line, limits);
    if (!item.ok()) return item.status();
    items.push_back(*std::move(item));
  }
  if (items.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": no prompts (the file is empty)"));
  }
  return std::unique_ptr<Workload>(std::make_unique<JsonlWorkload>(
      name, std::move(items), default_output, std::move(limits), seed));
}

absl::StatusOr<std::unique_ptr<Workload>> LoadJsonlWorkload(const std::string& path,
                                                            LengthSpec default_output,
                                                            ModelLimits limits, uint64_t seed) {
  absl::StatusOr<std::string> text = ReadFileBounded(path, kMaxDataFileBytes);
  if (!text.ok()) {
    return absl::Status(text.status().code(),
                        absl::StrCat("the prompts file ", text.status().message()));
  }
  return ParseJsonlWorkload(path, *text, default_output, std::move(limits), seed);
}

absl::Status CheckJsonlWorkload(const std::string& path) {
  ModelLimits any;
  any.vocab_size = 0;  // checked once the server's is known
  any.max_model_len = std::numeric_limits<int>::max();
  return LoadJsonlWorkload(path, LengthSpec{}, any, /*seed=*/0).status();
}

}  // namespace saturn::clients
