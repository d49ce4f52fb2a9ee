// Workload generators: length specs parse (and reject with the flag's name), fixed /
// uniform / normal lengths have the asked-for distribution, prompts fit the model, items are
// a function of (seed, index); JSONL files parse and their errors name file:line.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <set>

#include "clients/load/workload.h"

namespace saturn::clients {
namespace {

ModelLimits Limits(int max_model_len = 4096) {
  ModelLimits l;
  l.vocab_size = 256;
  l.max_model_len = max_model_len;
  l.avoid_token_ids = {1, 2};
  return l;
}

TEST(LengthSpecTest, ParsesTheThreeForms) {
  LengthSpec s = *ParseLengthSpec("--input_len", "128");
  EXPECT_EQ(s.kind, LengthSpec::Kind::kFixed);
  EXPECT_EQ(s.ToString(), "128");
  s = *ParseLengthSpec("--input_len", "uniform:64:256");
  EXPECT_EQ(s.kind, LengthSpec::Kind::kUniform);
  EXPECT_EQ(s.ToString(), "uniform:64:256");
  s = *ParseLengthSpec("--input_len", "normal:100:20");
  EXPECT_EQ(s.kind, LengthSpec::Kind::kNormal);
  EXPECT_EQ(s.ToString(), "normal:100:20");
}

TEST(LengthSpecTest, RejectsBadValuesNamingTheFlag) {
  for (const char* bad : {"0", "-3", "x", "uniform:5", "uniform:9:3", "uniform:0:3", "normal:0:1",
                          "normal:10:-1", "poisson:3:4", "", "2000000000", "uniform:1:2000000000",
                          "normal:3e9:0", "normal:10:inf", "normal:nan:1"}) {
    absl::StatusOr<LengthSpec> s = ParseLengthSpec("--output_len", bad);
    ASSERT_FALSE(s.ok()) << bad;
    EXPECT_NE(s.status().message().find("--output_len"), std::string::npos) << s.status();
  }
}

// A normal draw far past int's range wrapped to a negative and became 1 token.
TEST(LengthSpecTest, NormalDrawsStayInRange) {
  const LengthSpec s = *ParseLengthSpec("--output_len", "normal:1000000000:200000000");
  std::mt19937_64 rng(3);
  for (int i = 0; i < 1000; ++i) {
    const int x = s.Draw(rng);
    EXPECT_GE(x, 1);
    EXPECT_LE(x, kMaxLength);
  }
  LengthSpec past;  // as a parse no longer gives: the clamp holds anyway
  past.kind = LengthSpec::Kind::kNormal;
  past.a = 3e9;
  EXPECT_EQ(past.Draw(rng), kMaxLength);
}

struct Moments {
  double mean = 0, sd = 0;
  int min = 1 << 30, max = 0;
};

Moments InputLengths(const std::string& spec, int n = 20000) {
  auto w = MakeSyntheticWorkload(*ParseLengthSpec("--input_len", spec),
                                 *ParseLengthSpec("--output_len", "1"), Limits(), 7);
  std::vector<int> v;
  Moments m;
  for (int i = 0; i < n; ++i) {
    const int len = static_cast<int>(w->Get(i).prompt_token_ids.size());
    v.push_back(len);
    m.mean += static_cast<double>(len) / n;
    m.min = std::min(m.min, len);
    m.max = std::max(m.max, len);
  }
  for (int x : v) m.sd += (x - m.mean) * (x - m.mean) / (n - 1);
  m.sd = std::sqrt(m.sd);
  return m;
}

TEST(SyntheticWorkloadTest, FixedUniformAndNormalLengths) {
  Moments f = InputLengths("40", 200);
  EXPECT_EQ(f.min, 40);
  EXPECT_EQ(f.max, 40);

  // Uniform integers on [10, 50]: mean 30, sd sqrt((41^2 - 1) / 12) = 11.83.
  Moments u = InputLengths("uniform:10:50");
  EXPECT_EQ(u.min, 10);
  EXPECT_EQ(u.max, 50);
  EXPECT_NEAR(u.mean, 30, 5 * 11.83 / std::sqrt(20000.0));
  EXPECT_NEAR(u.sd, 11.83, 0.3);

  // Normal(200, 25), far from the clamp at 1.
  Moments n = InputLengths("normal:200:25");
  EXPECT_NEAR(n.mean, 200, 5 * 25 / std::sqrt(20000.0));
  EXPECT_NEAR(n.sd, 25, 0.7);
  EXPECT_GE(n.min, 1);
}

TEST(SyntheticWorkloadTest, ItemsAreDeterministicAndFitTheModel) {
  auto a = MakeSyntheticWorkload(*ParseLengthSpec("", "uniform:1:300"),
                                 *ParseLengthSpec("", "uniform:1:300"), Limits(256), 3);
  auto b = MakeSyntheticWorkload(*ParseLengthSpec("", "uniform:1:300"),
                                 *ParseLengthSpec("", "uniform:1:300"), Limits(256), 3);
  for (int i = 0; i < 500; ++i) {
    const WorkItem x = a->Get(i), y = b->Get(i);
    EXPECT_EQ(x.prompt_token_ids, y.prompt_token_ids);
    EXPECT_EQ(x.max_tokens, y.max_tokens);
    EXPECT_GE(x.max_tokens, 1);
    EXPECT_GE(x.prompt_token_ids.size(), 1u);
    EXPECT_LE(static_cast<int>(x.prompt_token_ids.size()) + x.max_tokens, 256);
    for (int id : x.prompt_token_ids) {
      EXPECT_TRUE(id >= 0 && id < 256 && id != 1 && id != 2) << id;
    }
  }
  // Order does not matter: item 7 is item 7.
  EXPECT_EQ(a->Get(7).prompt_token_ids, b->Get(7).prompt_token_ids);
}

LengthSpec Out16() { return *ParseLengthSpec("--output_len", "16"); }

TEST(JsonlWorkloadTest, ParsesTheThreePromptFormsAndCycles) {
  const std::string text =
      "{\"prompt\": \"hello\", \"max_tokens\": 5}\n"
      "\n"
      "{\"prompt_token_ids\": [3, 4, 5]}\r\n"
      "{\"input_len\": 12, \"output_len\": 7}\n";
  auto w = ParseJsonlWorkload("p.jsonl", text, Out16(), Limits(), 1);
  ASSERT_TRUE(w.ok()) << w.status();
  const WorkItem a = (*w)->Get(0), b = (*w)->Get(1), c = (*w)->Get(2), d = (*w)->Get(3);
  EXPECT_EQ(a.prompt_text, "hello");
  EXPECT_EQ(a.max_tokens, 5);
  EXPECT_EQ(b.prompt_token_ids, (std::vector<int>{3, 4, 5}));
  EXPECT_EQ(b.max_tokens, 16);
  EXPECT_EQ(c.prompt_token_ids.size(), 12u);
  EXPECT_EQ(c.max_tokens, 7);
  EXPECT_EQ(d.prompt_text, "hello");  // cycled
}

void ExpectError(const std::string& text, const std::string& where, const std::string& what) {
  auto w = ParseJsonlWorkload("prompts.jsonl", text, Out16(), Limits(), 1);
  ASSERT_FALSE(w.ok()) << text;
  const std::string msg(w.status().message());
  EXPECT_NE(msg.find(where), std::string::npos) << msg;
  EXPECT_NE(msg.find(what), std::string::npos) << msg;
}

TEST(JsonlWorkloadTest, ErrorsNameFileLineAndProblem) {
  const std::string ok = "{\"prompt\": \"a\"}\n";
  ExpectError(ok + ok + "{\"prompt\": \"a\"\n", "prompts.jsonl:3:", "not valid JSON");
  ExpectError("[1, 2]\n", "prompts.jsonl:1:", "expected a JSON object");
  ExpectError(ok + "{\"prompt\": 5}\n", "prompts.jsonl:2:", "\"prompt\" must be a string");
  ExpectError("{\"prompt_token_ids\": [1, 999]}\n",
              "prompts.jsonl:1:", "\"prompt_token_ids\"[1] must be an integer in [0, 256)");
  ExpectError("{\"prompt_token_ids\": []}\n", ":1:", "non-empty array");
  ExpectError("{\"prompt\": \"a\", \"max_tokens\": 0}\n",
              ":1:", "\"max_tokens\" must be an integer in [1, 1073741824]");
  ExpectError("{\"input_len\": 2147483647}\n",
              ":1:", "\"input_len\" must be an integer in [1, 1073741824]");
  ExpectError("{\"prompt\": \"a\", \"max_tokens\": 2.5}\n", ":1:", "\"max_tokens\"");
  ExpectError("{\"prompt\": \"a\", \"input_len\": 3}\n", ":1:", "exactly one of");
  ExpectError("{\"max_tokens\": 3}\n", ":1:", "exactly one of");
  ExpectError("{\"promt\": \"a\"}\n", ":1:", "unknown key \"promt\"");
  ExpectError("\n\n", "prompts.jsonl", "no prompts");
}

TEST(JsonlWorkloadTest, MissingFileIsNamed) {
  auto w = LoadJsonlWorkload("/nonexistent/prompts.jsonl", Out16(), Limits(), 1);
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.status().message().find("/nonexistent/prompts.jsonl"), std::string::npos);
}

// Before the server is known: every check but the ids' vocabulary, whose message then says
// what a token id is, not a made-up vocab_size.
TEST(JsonlWorkloadTest, CheckBeforeConnectingLeavesTheVocabularyOut) {
  const std::string path = ::testing::TempDir() + "/workload_check.jsonl";
  std::ofstream(path) << "{\"prompt_token_ids\": [7, 99999]}\n";
  EXPECT_TRUE(CheckJsonlWorkload(path).ok());
  std::ofstream(path) << "{\"prompt_token_ids\": [1, -2]}\n";
  const absl::Status s = CheckJsonlWorkload(path);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find(":1: \"prompt_token_ids\"[1] must be a token id (an integer >= 0)"),
            std::string::npos)
      << s;
}

TEST(JsonlWorkloadTest, ReadsAFile) {
  const std::string path = ::testing::TempDir() + "/workload_test.jsonl";
  std::ofstream(path) << "{\"prompt_token_ids\": [7]}\n";
  auto w = LoadJsonlWorkload(path, Out16(), Limits(), 1);
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ((*w)->Get(0).prompt_token_ids, std::vector<int>{7});
}

TEST(SyntheticWorkloadTest, SaysWhenItShrinksLengthsToFitTheContextAndShowsTheirValues) {
  auto fits = MakeSyntheticWorkload(*ParseLengthSpec("", "64"), *ParseLengthSpec("", "32"),
                                    Limits(4096), 1);
  EXPECT_EQ(fits->Adjustment(), "");
  EXPECT_EQ(fits->Describe(), "synthetic input_len=64 output_len=32 seed=1");

  auto shrunk =
      MakeSyntheticWorkload(*ParseLengthSpec("", "64"), *ParseLengthSpec("", "32"), Limits(40), 1);
  EXPECT_EQ(shrunk->Describe(), "synthetic input_len=8 (asked 64) output_len=32 seed=1");
  EXPECT_NE(shrunk->Adjustment().find("max_model_len 40"), std::string::npos)
      << shrunk->Adjustment();
  EXPECT_NE(shrunk->Adjustment().find("input_len 8 and output_len 32"), std::string::npos)
      << shrunk->Adjustment();
  EXPECT_EQ(shrunk->Get(0).prompt_token_ids.size(), 8u);
  EXPECT_EQ(shrunk->Get(0).max_tokens, 32);

  // JSONL input_len items that do not fit say so, counted.
  auto jsonl =
      ParseJsonlWorkload("p.jsonl", "{\"input_len\": 30, \"max_tokens\": 20}\n{\"input_len\": 5}\n",
                         *ParseLengthSpec("", "8"), Limits(40), 1);
  ASSERT_TRUE(jsonl.ok()) << jsonl.status();
  EXPECT_NE((*jsonl)->Adjustment().find("1 of 2 prompts"), std::string::npos)
      << (*jsonl)->Adjustment();
  EXPECT_EQ((*jsonl)->Get(0).prompt_token_ids.size(), 20u);

  // Distributions that can draw past the context say so too.
  auto drawn = MakeSyntheticWorkload(*ParseLengthSpec("", "uniform:8:64"),
                                     *ParseLengthSpec("", "8"), Limits(40), 1);
  EXPECT_NE(drawn->Adjustment().find("can exceed"), std::string::npos) << drawn->Adjustment();
}

// --prefix_len: every synthetic prompt starts with the same seeded ids (a prefix cache's
// hit), then its own, which are the ids the same item has without a prefix.
TEST(SyntheticWorkloadTest, SharedPrefixComesFirstThenEachItemsOwnInput) {
  const LengthSpec in = *ParseLengthSpec("", "32"), out = *ParseLengthSpec("", "8");
  auto w = MakeSyntheticWorkload(in, out, Limits(), 5, 1024);
  auto again = MakeSyntheticWorkload(in, out, Limits(), 5, 1024);
  auto plain = MakeSyntheticWorkload(in, out, Limits(), 5);
  EXPECT_EQ(w->Describe(), "synthetic prefix_len=1024 input_len=32 output_len=8 seed=5");
  EXPECT_EQ(w->Adjustment(), "");
  const std::vector<int> first = w->Get(0).prompt_token_ids;
  ASSERT_EQ(first.size(), 1056u);
  const std::vector<int> prefix(first.begin(), first.begin() + 1024);
  std::set<std::vector<int>> suffixes;
  for (int i = 0; i < 32; ++i) {
    const WorkItem item = w->Get(i);
    ASSERT_EQ(item.prompt_token_ids.size(), 1056u) << i;
    EXPECT_EQ(item.max_tokens, 8);
    EXPECT_EQ(std::vector<int>(item.prompt_token_ids.begin(), item.prompt_token_ids.begin() + 1024),
              prefix)
        << i;
    const std::vector<int> own(item.prompt_token_ids.begin() + 1024, item.prompt_token_ids.end());
    EXPECT_EQ(own, plain->Get(i).prompt_token_ids) << i;
    suffixes.insert(own);
    EXPECT_EQ(item.prompt_token_ids, again->Get(i).prompt_token_ids) << i;
    for (int id : item.prompt_token_ids) EXPECT_TRUE(id >= 0 && id < 256 && id != 1 && id != 2);
  }
  EXPECT_EQ(suffixes.size(), 32u);  // distinct inputs behind the one prefix
  // The prefix is not one id repeated, and another seed draws another.
  EXPECT_GT(std::set<int>(prefix.begin(), prefix.end()).size(), 100u);
  const std::vector<int> other =
      MakeSyntheticWorkload(in, out, Limits(), 6, 1024)->Get(0).prompt_token_ids;
  EXPECT_NE(std::vector<int>(other.begin(), other.begin() + 1024), prefix);
  // --prefix_len 0 is the plain workload.
  EXPECT_EQ(MakeSyntheticWorkload(in, out, Limits(), 5, 0)->Get(3).prompt_token_ids,
            plain->Get(3).prompt_token_ids);
}

// Fitting counts prefix + input + output: the output is kept, the input shortened to 1, then
// the prefix, which stays shared.
TEST(SyntheticWorkloadTest, FittingToTheContextCountsThePrefix) {
  const LengthSpec in = *ParseLengthSpec("", "32"), out = *ParseLengthSpec("", "8");
  auto input_cut = MakeSyntheticWorkload(in, out, Limits(1040), 5, 1024);
  EXPECT_EQ(input_cut->Describe(),
            "synthetic prefix_len=1024 input_len=8 (asked 32) output_len=8 seed=5");
  EXPECT_NE(input_cut->Adjustment().find("--prefix_len 1024 + --input_len 32 + --output_len 8"),
            std::string::npos)
      << input_cut->Adjustment();
  EXPECT_NE(input_cut->Adjustment().find("prefix_len 1024, input_len 8 and output_len 8"),
            std::string::npos)
      << input_cut->Adjustment();
  EXPECT_EQ(input_cut->Get(0).prompt_token_ids.size(), 1032u);

  auto both_cut = MakeSyntheticWorkload(in, out, Limits(40), 5, 1024);
  EXPECT_EQ(both_cut->Describe(),
            "synthetic prefix_len=31 (asked 1024) input_len=1 (asked 32) output_len=8 seed=5");
  const std::vector<int> full =
      MakeSyntheticWorkload(in, out, Limits(), 5, 1024)->Get(0).prompt_token_ids;
  for (int i = 0; i < 4; ++i) {
    const WorkItem item = both_cut->Get(i);
    ASSERT_EQ(item.prompt_token_ids.size(), 32u);
    EXPECT_EQ(item.max_tokens, 8);
    // The same prefix, cut to what fits.
    EXPECT_TRUE(std::equal(full.begin(), full.begin() + 31, item.prompt_token_ids.begin())) << i;
  }

  // Drawn inputs that can pass the context with the prefix say so; each fits.
  auto drawn =
      MakeSyntheticWorkload(*ParseLengthSpec("", "uniform:8:64"), out, Limits(1050), 5, 1000);
  EXPECT_NE(drawn->Adjustment().find("draws of --prefix_len 1000 + --input_len uniform:8:64"),
            std::string::npos)
      << drawn->Adjustment();
  for (int i = 0; i < 50; ++i) {
    const WorkItem item = drawn->Get(i);
    EXPECT_LE(static_cast<int>(item.prompt_token_ids.size()) + item.max_tokens, 1050) << i;
    EXPECT_TRUE(std::equal(full.begin(), full.begin() + 1000, item.prompt_token_ids.begin())) << i;
  }
}

}  // namespace
}  // namespace saturn::clients
