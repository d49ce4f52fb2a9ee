// engine/tokenizer/tokenizer_bpe.h against Hugging Face `tokenizers`: make_hf_tokenizers.py trains
// three small byte-level BPE tokenizers (GPT-2 style, GPT-2 with add_prefix_space, Llama 3 style
// with its split regex and ignore_merges) in the test's set-up and records the ids `tokenizers`
// gives for texts with contractions, numbers, whitespace runs, non-Latin scripts, emoji,
// Unicode whitespace and special tokens. Saturn's reader must give the same ids and decode
// them back to the same text. Without Python's `tokenizers` the comparison skips, saying so.
#include "engine/tokenizer/tokenizer_bpe.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tests/engine/tokenizer/hf_python.h"

namespace saturn {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class HfTokenizersTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    std::string tmpl = (fs::path(::testing::TempDir()) / "hf_tok_XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = new std::string(tmpl);
    code_ =
        hf_test::RunScript("engine/tokenizer/make_hf_tokenizers.py", *dir_, *dir_ + "/stderr.txt");
  }
  static void TearDownTestSuite() {
    fs::remove_all(*dir_);
    delete dir_;
  }
  void SetUp() override {
    if (hf_test::Missing(code_)) GTEST_SKIP() << hf_test::MissingMessage();
    ASSERT_EQ(code_, 0) << "make_hf_tokenizers.py failed: "
                        << hf_test::ReadFile(*dir_ + "/stderr.txt");
  }
  static std::string* dir_;
  static int code_;
};
std::string* HfTokenizersTest::dir_ = nullptr;
int HfTokenizersTest::code_ = -1;

TEST_F(HfTokenizersTest, SameIdsAsTransformersAndDecodesBack) {
  std::ifstream in(*dir_ + "/cases.json");
  const nlohmann::json cases = nlohmann::json::parse(in);
  ASSERT_GT(cases.size(), 40u);
  std::map<std::string, std::unique_ptr<BpeTokenizer>> tokenizers;
  int compared = 0;
  for (const auto& c : cases) {
    const std::string name = c["tokenizer"];
    if (!tokenizers.count(name)) {
      auto t = BpeTokenizer::Load(*dir_ + "/" + name + "/tokenizer.json");
      ASSERT_TRUE(t.ok()) << name << ": " << t.status();
      tokenizers[name] = std::move(*t);
    }
    const BpeTokenizer& t = *tokenizers[name];
    const std::string text = c["text"];
    const std::vector<int> want = c["ids"];
    auto got = t.Encode(text);
    ASSERT_TRUE(got.ok()) << name << " \"" << text << "\": " << got.status();
    EXPECT_EQ(*got, want) << name << " \"" << text << "\"";
    EXPECT_EQ(t.Decode(want), c["decoded"].get<std::string>()) << name << " \"" << text << "\"";
    std::string streamed;  // token by token, as a stream would
    for (int id : want) streamed += t.TokenBytes(id);
    EXPECT_EQ(streamed, t.Decode(want));
    ++compared;
  }
  EXPECT_EQ(compared, static_cast<int>(cases.size()));
  const BpeTokenizer& llama = *tokenizers["llama3"];
  const int eot = llama.TokenId("<|eot_id|>");
  ASSERT_GE(eot, 0);
  EXPECT_TRUE(llama.IsSpecial(eot));
  EXPECT_EQ(llama.Decode({eot}, /*skip_special=*/true), "");
  EXPECT_EQ(llama.Decode({eot}), "<|eot_id|>");
}

// What tokenizer.json may ask for beyond byte-level BPE is refused by name.
TEST(BpeTokenizerTest, RefusesWhatItDoesNotImplement) {
  const std::string model =
      R"("model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]})";
  const std::string byte_level = R"("pre_tokenizer": {"type": "ByteLevel"})";
  const struct {
    std::string json, says;
  } kRefused[] = {
      {"{" + model + R"(, "pre_tokenizer": {"type": "Metaspace"}})", "Metaspace"},
      {"{" + model + R"(, "pre_tokenizer": {"type": "Whitespace"}})", "Whitespace"},
      {"{" + model + ", " + byte_level + R"(, "normalizer": {"type": "NFKC"}})", "normalizer"},
      {R"({"model": {"type": "WordPiece", "vocab": {}}, )" + byte_level + "}", "WordPiece"},
      {R"({"model": {"type": "Unigram", "vocab": []}, )" + byte_level + "}", "Unigram"},
      {R"({"model": {"type": "BPE", "vocab": {}, "merges": [], "byte_fallback": true}, )" +
           byte_level + "}",
       "byte_fallback"},
      {R"({"model": {"type": "BPE", "vocab": {}, "merges": [],
           "continuing_subword_prefix": "##"}, )" +
           byte_level + "}",
       "continuing_subword_prefix"},
      {"{" + model + ", " + byte_level + R"(, "decoder": {"type": "Metaspace"}})", "decoder"},
      {"{" + model + ", " + byte_level +
           R"(, "added_tokens": [{"id": 3, "content": "<x>", "lstrip": true}]})",
       "lstrip"},
  };
  for (const auto& r : kRefused) {
    auto t = BpeTokenizer::Parse(r.json, "tokenizer.json");
    ASSERT_FALSE(t.ok()) << r.json;
    EXPECT_THAT(t.status().message(), HasSubstr(r.says)) << r.json;
  }
  EXPECT_FALSE(BpeTokenizer::Parse("[1]", "t").ok());
  EXPECT_FALSE(BpeTokenizer::Parse("{", "t").ok());
  EXPECT_FALSE(BpeTokenizer::Load("/nonexistent/tokenizer.json").ok());
}

// The merge order, hand-checked (this runs without Python's tokenizers): the lowest rank
// first, the leftmost of equal ranks, and a pair whose symbol merged elsewhere meanwhile is not
// merged (the heap's stale entries).
TEST(BpeTokenizerTest, MergesLowestRankFirstLeftmostOfEqualRanks) {
  auto make = [](const std::string& merges) {
    return BpeTokenizer::Parse(
        R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "c": 2, "aa": 3, "ab": 4,
        "bc": 5, "aab": 6, "aaaa": 7}, "merges": [)" +
            merges + R"(]}, "pre_tokenizer": {"type": "ByteLevel"}})",
        "t");
  };
  const struct {
    std::string merges, text;
    std::vector<int> ids;
  } kCases[] = {
      {R"("a a")", "aaa", {3, 0}},                  // leftmost of equal ranks: aa a
      {R"("a a")", "aaaaa", {3, 3, 0}},             // aa aa a
      {R"("b c", "a b")", "abc", {0, 5}},           // rank 0 first: a bc, never ab c
      {R"("a b", "b c")", "abc", {4, 2}},           // ab c
      {R"("a b", "a a", "a ab")", "aab", {6}},      // a ab, then aab by its own rank
      {R"("a b", "a a")", "aab", {0, 4}},           // a ab: (a, a) went stale, never a + ab
      {R"("a a", "aa aa")", "aaaa", {7}},           // aa a a, aa aa, aaaa
      {R"("a a", "aa aa")", "aaaaaa", {7, 3}},      // aaaa aa
      {R"("a a", "aa aa")", "aaaaaaa", {7, 3, 0}},  // aaaa aa a
  };
  for (const auto& c : kCases) {
    auto t = make(c.merges);
    ASSERT_TRUE(t.ok()) << t.status();
    auto ids = (*t)->Encode(c.text);
    ASSERT_TRUE(ids.ok()) << ids.status();
    EXPECT_EQ(*ids, c.ids) << c.merges << " on " << c.text;
  }
}

// A token id that is not an integer in [0, 2^31 - 1) is refused naming where it stands.
TEST(BpeTokenizerTest, TokenIdsOutOfRangeAreRefusedByName) {
  const std::string byte_level = R"("pre_tokenizer": {"type": "ByteLevel"})";
  const struct {
    std::string json, says;
  } kRefused[] = {
      {R"({"model": {"type": "BPE", "vocab": {"a": -1}, "merges": []}, )" + byte_level + "}",
       R"(model.vocab["a"] is -1)"},
      {R"({"model": {"type": "BPE", "vocab": {"a": 2147483647}, "merges": []}, )" + byte_level +
           "}",
       R"(model.vocab["a"] is 2147483647)"},
      {R"({"model": {"type": "BPE", "vocab": {"a": 1e30}, "merges": []}, )" + byte_level + "}",
       R"(model.vocab["a"] is 1e+30)"},
      {R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}, )" + byte_level +
           R"(, "added_tokens": [{"id": 18446744073709551615, "content": "<x>"}]})",
       "added_tokens id is 18446744073709551615"},
  };
  for (const auto& r : kRefused) {
    auto t = BpeTokenizer::Parse(r.json, "tokenizer.json");
    ASSERT_FALSE(t.ok()) << r.json;
    EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument) << r.json;
    EXPECT_THAT(t.status().message(), HasSubstr(r.says)) << r.json;
  }
}

// Hand-checked merges: "ab" is one token, the byte-level alphabet covers what is left. The
// model's empty prefix/suffix strings are how GPT-2's own tokenizer.json writes "none".
TEST(BpeTokenizerTest, MergesByRankAndMapsBytes) {
  // Byte-level characters: ' ' is "Ġ" (U+0120), 'a' and 'b' themselves.
  const std::string json = R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2,
      "Ġ": 3, "Ġab": 4}, "merges": [["a", "b"], ["Ġ", "ab"]], "dropout": null,
      "continuing_subword_prefix": "", "end_of_word_suffix": ""},
      "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "use_regex": true},
      "added_tokens": [{"id": 5, "content": "<s>", "special": true}]})";
  auto t = BpeTokenizer::Parse(json, "t");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(*(*t)->Encode("ab ab"), (std::vector<int>{2, 4}));
  EXPECT_EQ(*(*t)->Encode("<s>ba"), (std::vector<int>{5, 1, 0}));
  EXPECT_EQ((*t)->Decode({2, 4}), "ab ab");
  EXPECT_FALSE((*t)->Encode("c").ok());  // not in this vocabulary: an error, never dropped
  // Ill-formed UTF-8 (a stray continuation byte, a truncated sequence, a surrogate) is refused
  // naming the byte, never turned into U+FFFD's ids.
  for (const std::string bad : {"ab\x80", "ab\xC3",
                                "a\xED\xA0\x80"
                                "b"}) {
    auto ids = (*t)->Encode(bad);
    ASSERT_FALSE(ids.ok()) << bad;
    EXPECT_EQ(ids.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(ids.status().message(), HasSubstr("is not valid UTF-8"));
  }
}

}  // namespace
}  // namespace saturn
