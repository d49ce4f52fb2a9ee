// engine/tokenizer/tokenizer_gguf.h: a GGUF file's tokenizer.ggml.* metadata read as the
// tokenizer.json it stands for. A small byte-level BPE vocabulary written both ways (tokenizer.json
// beside tokenizer_config.json, and GGUF metadata with tests/engine/model/gguf_writer.h) must give
// the same ids; the prompt's BOS/EOS follow llama.cpp's rule (src/llama-vocab.cpp); every refusal
// names its key. make_gguf_tokenizers.py then converts Hugging Face `tokenizers`' own
// tokenizers to GGUF with llama.cpp's `gguf` package, as convert_hf_to_gguf.py does, and Saturn
// must give the ids `tokenizers` gives (that comparison skips, saying so, without the packages).
#include "engine/tokenizer/tokenizer_gguf.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>

#include "absl/strings/str_cat.h"
#include "engine/tokenizer/text_tokenizer.h"
#include "engine/tokenizer/tokenizer_hf.h"
#include "tests/engine/model/gguf_writer.h"
#include "tests/engine/tokenizer/hf_python.h"

namespace saturn {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// GPT-2's bytes_to_unicode: each byte as the printable character tokenizer.json writes it.
const std::array<std::string, 256>& ByteChars() {
  static const std::array<std::string, 256> chars = [] {
    std::array<std::string, 256> c;
    int next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
      const int cp = printable ? b : next++;
      c[b] = cp < 0x80 ? std::string(1, static_cast<char>(cp))
                       : std::string{static_cast<char>(0xC0 | (cp >> 6)),
                                     static_cast<char>(0x80 | (cp & 0x3F))};
    }
    return c;
  }();
  return chars;
}

std::string Mapped(const std::string& bytes) {
  std::string out;
  for (unsigned char b : bytes) out += ByteChars()[b];
  return out;
}

constexpr int kNormal = 1, kControl = 3, kUserDefined = 4, kUnused = 5;

// A vocabulary by id: the 256 bytes, the words' merges (each word built left to right), then
// two control tokens, an unused placeholder and a user-defined token.
struct Vocab {
  std::vector<std::string> tokens;  // GGUF's form: normal ones byte-mapped
  std::vector<int32_t> types;
  std::vector<std::string> merges;
  int bos = -1, eot = -1, unused = -1, tool = -1;

  int Add(const std::string& token, int type) {
    tokens.push_back(token);
    types.push_back(type);
    return static_cast<int>(tokens.size()) - 1;
  }
};

Vocab SmallVocab() {
  Vocab v;
  for (int b = 0; b < 256; ++b) v.Add(ByteChars()[b], kNormal);
  std::map<std::string, bool> have;
  for (const std::string& t : v.tokens) have[t] = true;
  for (const char* word : {"he", "hello", " world", " the", "the", " wor", "12", "123", "  ",
                           "\n\n", " é", "日本", "😀"}) {
    const std::string w = word;
    std::string cur = Mapped(w.substr(0, 1));
    for (size_t i = 1; i < w.size(); ++i) {
      const std::string next = Mapped(w.substr(i, 1));
      if (!have[cur + next]) {
        v.merges.push_back(cur + " " + next);
        v.Add(cur + next, kNormal);
        have[cur + next] = true;
      }
      cur += next;
    }
  }
  v.bos = v.Add("<|begin_of_text|>", kControl);
  v.eot = v.Add("<|eot_id|>", kControl);
  v.unused = v.Add("[PAD300]", kUnused);
  v.tool = v.Add("<tool>", kUserDefined);
  return v;
}

// What a test writes: the vocabulary and the other tokenizer keys (absent where unset).
struct Spec {
  Vocab v = SmallVocab();
  std::optional<std::string> model = "gpt2", pre = "llama-bpe";
  bool write_types = true;
  std::optional<uint32_t> bos_id, eos_id;
  std::optional<bool> add_bos, add_eos;

  Spec() : bos_id(v.bos), eos_id(v.eot) {}
  testing_gguf::Writer Writer() const {
    testing_gguf::Writer w;
    w.Str("general.architecture", "llama");
    if (model) w.Str("tokenizer.ggml.model", *model);
    if (pre) w.Str("tokenizer.ggml.pre", *pre);
    w.StrArray("tokenizer.ggml.tokens", v.tokens);
    if (write_types) w.I32Array("tokenizer.ggml.token_type", v.types);
    w.StrArray("tokenizer.ggml.merges", v.merges);
    if (bos_id) w.U32("tokenizer.ggml.bos_token_id", *bos_id);
    if (eos_id) w.U32("tokenizer.ggml.eos_token_id", *eos_id);
    if (add_bos) w.Bool("tokenizer.ggml.add_bos_token", *add_bos);
    if (add_eos) w.Bool("tokenizer.ggml.add_eos_token", *add_eos);
    return w;
  }
  absl::StatusOr<std::unique_ptr<GgufTokenizer>> Load() const {
    const std::string bytes = Writer().Bytes();
    absl::StatusOr<std::unique_ptr<GgufFile>> f = GgufFile::Parse(
        absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()),
        "t.gguf");
    if (!f.ok()) return f.status();
    return GgufTokenizer::FromFile(**f);
  }
};

// The same vocabulary as Hugging Face writes it: tokenizer.json (the pre-tokenizer the GGUF
// name stands for) and tokenizer_config.json asking for BOS.
void WriteTokenizerJson(const Vocab& v, const std::string& pre, const fs::path& dir) {
  nlohmann::json vocab = nlohmann::json::object(), added = nlohmann::json::array();
  for (size_t i = 0; i < v.tokens.size(); ++i) {
    if (v.types[i] == kNormal) vocab[v.tokens[i]] = i;
    if (v.types[i] == kControl || v.types[i] == kUserDefined) {
      added.push_back({{"id", i}, {"content", v.tokens[i]}, {"special", v.types[i] == kControl}});
    }
  }
  const bool llama3 = pre == "llama-bpe";
  nlohmann::json pre_tokenizer =
      llama3
          ? nlohmann::
                json{{"type", "Sequence"},
                     {"pretokenizers",
                      {{{"type", "Split"},
                        {"pattern",
                         {{"Regex",
                           R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"}}},
                        {"behavior", "Isolated"},
                        {"invert", false}},
                       {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}}
          : nlohmann::json{{"type", "ByteLevel"}, {"add_prefix_space", false}};
  const nlohmann::json j = {
      {"added_tokens", added},
      {"normalizer", nullptr},
      {"pre_tokenizer", pre_tokenizer},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model",
       {{"type", "BPE"}, {"ignore_merges", llama3}, {"vocab", vocab}, {"merges", v.merges}}}};
  fs::create_directories(dir);
  std::ofstream(dir / "tokenizer.json") << j.dump();
  std::ofstream(dir / "tokenizer_config.json")
      << nlohmann::json{{"add_bos_token", llama3}, {"bos_token", "<|begin_of_text|>"}}.dump();
}

class GgufTokenizerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::path(::testing::TempDir()) / "gguf_tok_XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

const char* const kTexts[] = {
    "hello world",
    "the hello the world he",
    "Hello, World! It's 12:45",
    "12345 678 9 0123",
    "a   b\n\n\n\tc  \r\n  end   ",
    " é déjà 日本語 😀😀 Ωmega",
    "<|begin_of_text|>hello<|eot_id|> the<tool>world<|eot_id|>",
    "[PAD300] is unused",
    "",
    " ",
};

// The GGUF file and the tokenizer.json it stands for give the same ids, with BOS by the
// same rule (llama-bpe: BOS by default; tokenizer_config.json add_bos_token for the JSON).
TEST_F(GgufTokenizerTest, SameIdsAsTokenizerJson) {
  for (const std::string pre : {"llama-bpe", "gpt-2"}) {
    SCOPED_TRACE(pre);
    Spec s;
    s.pre = pre;
    auto gguf = s.Load();
    ASSERT_TRUE(gguf.ok()) << gguf.status();
    WriteTokenizerJson(s.v, pre, dir_ / pre);
    auto json = HfTokenizer::Load((dir_ / pre).string());
    ASSERT_TRUE(json.ok()) << json.status();
    EXPECT_EQ((*gguf)->pre(), pre);
    for (const char* text : kTexts) {
      auto want = (*json)->EncodePrompt(text);
      auto got = (*gguf)->EncodePrompt(text);
      ASSERT_TRUE(want.ok()) << want.status();
      ASSERT_TRUE(got.ok()) << got.status();
      EXPECT_EQ(*got, *want) << "\"" << text << "\"";
      auto body = (*gguf)->bpe().Encode(text);
      ASSERT_TRUE(body.ok());
      EXPECT_EQ((*gguf)->bpe().Decode(*body), text);
    }
  }
}

// Hand-checked ids: merges and whole-word pieces, special tokens matched in the text.
TEST_F(GgufTokenizerTest, EncodesByMergesAndSpecialTokens) {
  Spec s;
  auto t = s.Load();
  ASSERT_TRUE(t.ok()) << t.status();
  const BpeTokenizer& bpe = (*t)->bpe();
  const int hello = bpe.TokenId("hello"), world = bpe.TokenId(Mapped(" world"));
  ASSERT_GE(hello, 256);
  ASSERT_GE(world, 256);
  EXPECT_THAT(*(*t)->EncodePrompt("hello world"), ElementsAre(s.v.bos, hello, world));
  EXPECT_THAT(*bpe.Encode("<|eot_id|><tool>"), ElementsAre(s.v.eot, s.v.tool));
  EXPECT_THAT(*bpe.Encode("1234"), ElementsAre(bpe.TokenId("123"), '4'));
  EXPECT_TRUE(bpe.IsSpecial(s.v.bos));
  EXPECT_FALSE(bpe.IsSpecial(s.v.tool));  // user-defined: an added token, not a special one
  EXPECT_EQ(bpe.TokenBytes(world), " world");
  EXPECT_EQ(bpe.TokenBytes(s.v.tool), "<tool>");
  EXPECT_FALSE(bpe.Encode("bad \xff byte").ok());
}

// llama.cpp's rule: BOS by default for the Llama 3 names, none for gpt-2; the file's
// add_bos_token / add_eos_token override it.
TEST_F(GgufTokenizerTest, BosAndEosFollowLlamaCpp) {
  for (const std::string pre : {"llama-bpe", "llama3", "llama-v3"}) {
    Spec s;
    s.pre = pre;
    auto t = s.Load();
    ASSERT_TRUE(t.ok()) << pre << ": " << t.status();
    EXPECT_THAT((*t)->prefix(), ElementsAre(s.v.bos)) << pre;
    EXPECT_TRUE((*t)->suffix().empty()) << pre;
  }
  Spec gpt2;
  gpt2.pre = "gpt-2";
  auto t = gpt2.Load();
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_TRUE((*t)->prefix().empty());
  EXPECT_TRUE((*t)->suffix().empty());

  Spec flipped;
  flipped.add_bos = false;
  flipped.add_eos = true;
  t = flipped.Load();
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_TRUE((*t)->prefix().empty());
  EXPECT_THAT((*t)->suffix(), ElementsAre(flipped.v.eot));
  EXPECT_THAT(*(*t)->EncodePrompt("hello"),
              ElementsAre((*t)->bpe().TokenId("hello"), flipped.v.eot));

  Spec gpt2_bos;  // add_bos_token true turns BOS on where the name has none
  gpt2_bos.pre = "gpt-2";
  gpt2_bos.add_bos = true;
  t = gpt2_bos.Load();
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_THAT((*t)->prefix(), ElementsAre(gpt2_bos.v.bos));

  Spec no_ids;  // ids are needed only where a token is added
  no_ids.bos_id.reset();
  no_ids.eos_id.reset();
  no_ids.add_bos = false;
  EXPECT_TRUE(no_ids.Load().ok());
}

// Unused placeholders keep their ids (vocab_size counts them) but have no text: they are never
// produced and their text, duplicates included, is not checked.
TEST_F(GgufTokenizerTest, UnusedTokensAreSkipped) {
  Spec s;
  const int second = s.v.Add("[PAD300]", kUnused);  // the same placeholder text twice
  const int after = s.v.Add("<after>", kControl);
  auto t = s.Load();
  ASSERT_TRUE(t.ok()) << t.status();
  const BpeTokenizer& bpe = (*t)->bpe();
  EXPECT_EQ((*t)->vocab_size(), static_cast<int>(s.v.tokens.size()));
  EXPECT_EQ(bpe.TokenId("[PAD300]"), -1);
  EXPECT_EQ(bpe.TokenBytes(s.v.unused), "");
  EXPECT_EQ(bpe.TokenBytes(second), "");
  EXPECT_EQ(bpe.TokenId("<after>"), after);
  auto ids = bpe.Encode("[PAD300]<after>");
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(ids->back(), after);
  for (int id : *ids) {
    EXPECT_NE(id, s.v.unused);
    EXPECT_NE(id, second);
  }
}

// Without token_type every token is normal (llama.cpp's reading): the control tokens are then
// vocabulary entries, not matched in text.
TEST_F(GgufTokenizerTest, AbsentTokenTypesMeanNormal) {
  Spec s;
  s.v.tokens[s.v.unused] = "<pad>";
  s.write_types = false;
  auto t = s.Load();
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_FALSE((*t)->bpe().IsSpecial(s.v.bos));
  EXPECT_EQ((*t)->bpe().TokenId("<|begin_of_text|>"), s.v.bos);
  auto ids = (*t)->bpe().Encode("<|eot_id|>");
  ASSERT_TRUE(ids.ok());
  EXPECT_GT(ids->size(), 1u);
}

TEST_F(GgufTokenizerTest, LoadTextTokenizerReadsGgufFiles) {
  Spec s;
  const std::string path = (dir_ / "model.gguf").string();
  s.Writer().Save(path);
  auto t = LoadTextTokenizer(path, /*skip=*/false);
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_NE(*t, nullptr);
  EXPECT_EQ((*t)->kind(), "gguf");
  EXPECT_EQ((*t)->id_limit(), static_cast<int>(s.v.tokens.size()));
  EXPECT_THAT((*t)->Describe(), HasSubstr("llama-bpe"));
  auto direct = GgufTokenizer::Load(path);
  ASSERT_TRUE(direct.ok()) << direct.status();
  for (const char* text : kTexts) {
    auto ids = (*t)->Encode(text);
    ASSERT_TRUE(ids.ok()) << ids.status();
    EXPECT_EQ(*ids, *(*direct)->EncodePrompt(text));
    ASSERT_FALSE(ids->empty());
    EXPECT_EQ(ids->front(), s.v.bos);
    std::string streamed;  // special tokens stream no text; the rest streams back the text
    for (int id : *ids) streamed += (*t)->TokenBytes(id);
    std::string want = text;
    for (const std::string special : {"<|begin_of_text|>", "<|eot_id|>"}) {
      for (size_t at; (at = want.find(special)) != std::string::npos;)
        want.erase(at, special.size());
    }
    EXPECT_EQ(streamed, want);
  }
  EXPECT_EQ((*t)->TokenBytes(s.v.unused), "");

  auto skipped = LoadTextTokenizer(path, /*skip=*/true);
  ASSERT_TRUE(skipped.ok());
  EXPECT_EQ(*skipped, nullptr);

  Spec bad;  // a refused tokenizer stops the load, naming the key and the way out
  bad.model = "llama";
  const std::string bad_path = (dir_ / "spm.gguf").string();
  bad.Writer().Save(bad_path);
  auto refused = LoadTextTokenizer(bad_path, /*skip=*/false);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(refused.status().message(), HasSubstr("tokenizer.ggml.model"));
  EXPECT_THAT(refused.status().message(), HasSubstr("--skip_tokenizer_init"));
  EXPECT_TRUE(LoadTextTokenizer(bad_path, /*skip=*/true).ok());
  EXPECT_FALSE(GgufTokenizer::Load((dir_ / "missing.gguf").string()).ok());

  // A file without tokenizer metadata has no tokenizer (token ids only); one that does not
  // parse is left to the weight loader, which names what is wrong.
  testing_gguf::Writer plain;
  plain.Str("general.architecture", "llama");
  const std::string plain_path = (dir_ / "plain.gguf").string();
  plain.Save(plain_path);
  auto none = LoadTextTokenizer(plain_path, /*skip=*/false);
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ(*none, nullptr);
  const std::string junk_path = (dir_ / "junk.gguf").string();
  std::ofstream(junk_path) << "not a gguf file";
  auto junk = LoadTextTokenizer(junk_path, /*skip=*/false);
  ASSERT_TRUE(junk.ok()) << junk.status();
  EXPECT_EQ(*junk, nullptr);
}

// Each refusal names the file and its key; what Saturn does not implement is UNIMPLEMENTED.
TEST_F(GgufTokenizerTest, RefusalsNameTheirKey) {
  using Code = absl::StatusCode;
  struct Case {
    std::string what;
    std::function<void(Spec*)> change;
    Code code;
    std::vector<std::string> says;
  };
  const Vocab base = SmallVocab();
  const int n = static_cast<int>(base.tokens.size());
  const size_t n_merges = base.merges.size();
  const auto he = std::find(base.tokens.begin(), base.tokens.end(), "he") - base.tokens.begin();
  const std::vector<Case> cases = {
      {"no model",
       [](Spec* s) { s->model.reset(); },
       Code::kInvalidArgument,
       {"tokenizer.ggml.model", "missing"}},
      {"SentencePiece",
       [](Spec* s) { s->model = "llama"; },
       Code::kUnimplemented,
       {"tokenizer.ggml.model", "\"llama\"", "SentencePiece"}},
      {"WordPiece",
       [](Spec* s) { s->model = "bert"; },
       Code::kUnimplemented,
       {"tokenizer.ggml.model", "\"bert\""}},
      {"pre default",
       [](Spec* s) { s->pre = "default"; },
       Code::kUnimplemented,
       {"tokenizer.ggml.pre", "\"default\""}},
      {"pre other",
       [](Spec* s) { s->pre = "qwen2"; },
       Code::kUnimplemented,
       {"tokenizer.ggml.pre", "\"qwen2\""}},
      {"no pre",
       [](Spec* s) { s->pre.reset(); },
       Code::kInvalidArgument,
       {"tokenizer.ggml.pre", "missing"}},
      {"byte token",
       [](Spec* s) { s->v.types[7] = 6; },
       Code::kUnimplemented,
       {"tokenizer.ggml.token_type[7]", "byte", "SentencePiece"}},
      {"type 9",
       [](Spec* s) { s->v.types[3] = 9; },
       Code::kInvalidArgument,
       {"tokenizer.ggml.token_type[3]", "not a token type"}},
      {"type count",
       [](Spec* s) { s->v.types.pop_back(); },
       Code::kInvalidArgument,
       {"tokenizer.ggml.token_type", absl::StrCat(n - 1, " entries"), absl::StrCat(n)}},
      {"bos out of range",
       [n](Spec* s) { s->bos_id = n + 5; },
       Code::kInvalidArgument,
       {"tokenizer.ggml.bos_token_id", absl::StrCat(n + 5)}},
      {"eos out of range",
       [n](Spec* s) { s->eos_id = n; },
       Code::kInvalidArgument,
       {"tokenizer.ggml.eos_token_id"}},
      {"bos missing",
       [](Spec* s) { s->bos_id.reset(); },
       Code::kInvalidArgument,
       {"tokenizer.ggml.bos_token_id", "missing", "llama-bpe"}},
      {"eos missing",
       [](Spec* s) {
         s->eos_id.reset();
         s->add_eos = true;
       },
       Code::kInvalidArgument,
       {"tokenizer.ggml.eos_token_id", "missing"}},
      {"merge without space",
       [](Spec* s) { s->v.merges.push_back("ab"); },
       Code::kInvalidArgument,
       {absl::StrCat("tokenizer.ggml.merges[", n_merges, "]"), "\"ab\""}},
      {"merge of three",
       [](Spec* s) { s->v.merges.push_back("a b c"); },
       Code::kInvalidArgument,
       {absl::StrCat("tokenizer.ggml.merges[", n_merges, "]")}},
      {"duplicate",
       [](Spec* s) { s->v.Add("he", kNormal); },
       Code::kInvalidArgument,
       {absl::StrCat("tokenizer.ggml.tokens[", n, "] \"he\" duplicates tokenizer.ggml.tokens[", he,
                     "]")}},
      {"invalid UTF-8",
       [](Spec* s) { s->v.Add("\xC3(", kNormal); },
       Code::kInvalidArgument,
       {absl::StrCat("tokenizer.ggml.tokens[", n, "]"), "UTF-8"}},
      {"empty token",
       [](Spec* s) { s->v.Add("", kControl); },
       Code::kInvalidArgument,
       {absl::StrCat("tokenizer.ggml.tokens[", n, "]"), "empty"}},
  };
  for (const Case& c : cases) {
    Spec s;
    c.change(&s);
    auto t = s.Load();
    ASSERT_FALSE(t.ok()) << c.what;
    EXPECT_EQ(t.status().code(), c.code) << c.what << ": " << t.status();
    EXPECT_THAT(t.status().message(), HasSubstr("t.gguf")) << c.what;
    for (const std::string& says : c.says) {
      EXPECT_THAT(t.status().message(), HasSubstr(says)) << c.what;
    }
  }
}

// Keys of the wrong GGUF type are named too.
TEST_F(GgufTokenizerTest, IllTypedKeysAreNamed) {
  const struct {
    std::string key;
    std::function<void(testing_gguf::Writer*)> write;
  } kCases[] = {
      {"tokenizer.ggml.add_bos_token",
       [](testing_gguf::Writer* w) { w->Str("tokenizer.ggml.add_bos_token", "yes"); }},
      {"tokenizer.ggml.bos_token_id",
       [](testing_gguf::Writer* w) { w->F32("tokenizer.ggml.bos_token_id", 1); }},
      {"tokenizer.ggml.merges",
       [](testing_gguf::Writer* w) {
         w->I32Array("tokenizer.ggml.merges", {1, 2});
       }},
  };
  for (const auto& c : kCases) {
    Spec s;
    if (c.key == "tokenizer.ggml.bos_token_id") s.bos_id.reset();
    testing_gguf::Writer w;
    w.Str("tokenizer.ggml.model", "gpt2");
    w.Str("tokenizer.ggml.pre", "llama-bpe");
    w.StrArray("tokenizer.ggml.tokens", s.v.tokens);
    if (c.key != "tokenizer.ggml.merges") w.StrArray("tokenizer.ggml.merges", s.v.merges);
    if (c.key != "tokenizer.ggml.bos_token_id") w.U32("tokenizer.ggml.bos_token_id", s.v.bos);
    c.write(&w);
    const std::string bytes = w.Bytes();
    auto f = GgufFile::Parse(
        absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()), "t");
    ASSERT_TRUE(f.ok()) << f.status();
    auto t = GgufTokenizer::FromFile(**f);
    ASSERT_FALSE(t.ok()) << c.key;
    EXPECT_THAT(t.status().message(), HasSubstr(c.key));
  }
}

// Against Hugging Face `tokenizers`, through llama.cpp's own converter path and GGUF writer.
TEST_F(GgufTokenizerTest, SameIdsAsHuggingFaceThroughLlamaCppGguf) {
  const int code = hf_test::RunScript("engine/tokenizer/make_gguf_tokenizers.py", dir_.string(),
                                      (dir_ / "stderr.txt").string());
  if (hf_test::Missing(code)) {
    GTEST_SKIP() << "Hugging Face `tokenizers` and llama.cpp's `gguf` (PyPI) are not both "
                    "available to "
                 << hf_test::Python()
                 << ", so there is nothing to compare with; tests/run_all.sh installs them "
                    "where pip can reach PyPI";
  }
  ASSERT_EQ(code, 0) << "make_gguf_tokenizers.py failed: "
                     << hf_test::ReadFile((dir_ / "stderr.txt").string());
  std::ifstream in(dir_ / "cases.json");
  const nlohmann::json cases = nlohmann::json::parse(in);
  ASSERT_GT(cases.size(), 20u);
  std::map<std::string, std::unique_ptr<GgufTokenizer>> tokenizers;
  for (const auto& c : cases) {
    const std::string name = c["gguf"];
    if (!tokenizers.count(name)) {
      auto t = GgufTokenizer::Load((dir_ / name).string());
      ASSERT_TRUE(t.ok()) << name << ": " << t.status();
      EXPECT_EQ((*t)->vocab_size(), c["n_tokens"].get<int>()) << name;
      // llama.cpp: BOS by default for llama-bpe, none for gpt-2; no EOS.
      if (name == "llama3.gguf") {
        EXPECT_THAT((*t)->prefix(), ElementsAre(c["bos"].get<int>()));
      } else {
        EXPECT_TRUE((*t)->prefix().empty()) << name;
      }
      EXPECT_TRUE((*t)->suffix().empty()) << name;
      tokenizers[name] = std::move(*t);
    }
    const GgufTokenizer& t = *tokenizers[name];
    const std::string text = c["text"];
    const std::vector<int> want = c["ids"];
    auto got = t.bpe().Encode(text);
    ASSERT_TRUE(got.ok()) << name << " \"" << text.substr(0, 80) << "\": " << got.status();
    EXPECT_EQ(*got, want) << name << " \"" << text.substr(0, 80) << "\"";
    EXPECT_EQ(t.bpe().Decode(want), text) << name;
  }
  EXPECT_EQ(tokenizers.size(), 2u);
}

}  // namespace
}  // namespace saturn
