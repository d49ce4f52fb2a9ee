// Text prompts for a Hugging Face checkpoint, end to end through the server: the test's set-up
// trains a Llama 3 style tokenizer.json with Hugging Face `tokenizers` (BOS template in its
// post_processor) and writes a tiny random-weight checkpoint with its vocabulary beside it.
// prompt_text must become the ids `tokenizers` gives (directly, and through Generate: the
// same seeded stream as the ids sent as prompt_token_ids), and the streamed text must equal
// `tokenizers`' decode of the streamed ids, UTF-8 split across tokens included. Also the BOS
// rule's tokenizer_config.json branch and the refusal of a post-processor Saturn lacks.
// Without Python's `tokenizers` (or without the reader: no ICU) the tests skip, saying so.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "engine/model/model_config.h"
#include "engine/model/weights.h"
#include "engine/tokenizer/text_tokenizer.h"
#include "server/text_stream.h"
#include "server_test_util.h"
#include "tests/engine/tokenizer/hf_python.h"

namespace saturn::testing {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

std::string Script() { return "server/hf_tokenizer_e2e.py"; }

class HfTokenizerServerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    std::string tmpl = (fs::path(::testing::TempDir()) / "hf_ckpt_XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = new std::string(tmpl);
    code_ = hf_test::RunScript(Script(), "train " + *dir_, *dir_ + "/stderr.txt");
    if (code_ != 0) return;
    cases_ = new nlohmann::json(nlohmann::json::parse(std::ifstream(*dir_ + "/cases.json")));
    ModelConfig c = *PresetConfig("tiny");
    c.name = "hf-tiny";
    c.vocab_size = (*cases_)["vocab_size"];
    c.bos_token_id = (*cases_)["bos"];
    absl::StatusOr<ModelWeights> w = RandomWeights(c, 42);
    ASSERT_TRUE(w.ok()) << w.status();
    ASSERT_TRUE(SaveHfCheckpoint(*w, *dir_).ok());
  }
  static void TearDownTestSuite() {
    fs::remove_all(*dir_);
    delete dir_;
    delete cases_;
  }
  void SetUp() override {
    if (hf_test::Missing(code_)) GTEST_SKIP() << hf_test::MissingMessage();
    ASSERT_EQ(code_, 0) << "hf_tokenizer_e2e.py failed: "
                        << hf_test::ReadFile(*dir_ + "/stderr.txt");
    absl::StatusOr<std::unique_ptr<TextTokenizer>> t = LoadTextTokenizer(*dir_, false);
    if (!t.ok() && absl::StrContains(t.status().message(), "no tokenizer.json reader")) {
      GTEST_SKIP() << t.status().message();
    }
    ASSERT_TRUE(t.ok()) << t.status();
    ASSERT_NE(*t, nullptr);
    tokenizer_ = std::move(*t);
  }

  // `tokenizers`' decode of `ids`, special tokens skipped.
  static std::string HfDecode(const std::vector<int>& ids) {
    std::string args = "decode " + *dir_;
    for (int id : ids) args += " " + std::to_string(id);
    const std::string out_path = *dir_ + "/decoded.txt";
    const int code = hf_test::RunScript(Script(), args + " > " + out_path, *dir_ + "/stderr.txt");
    if (code != 0) return "<decode failed: " + hf_test::ReadFile(*dir_ + "/stderr.txt") + ">";
    return hf_test::ReadFile(out_path);
  }

  static std::string* dir_;
  static nlohmann::json* cases_;
  static int code_;
  std::unique_ptr<TextTokenizer> tokenizer_;
};
std::string* HfTokenizerServerTest::dir_ = nullptr;
nlohmann::json* HfTokenizerServerTest::cases_ = nullptr;
int HfTokenizerServerTest::code_ = -1;

TEST_F(HfTokenizerServerTest, PromptTextGetsTheIdsTokenizersGivesWithBos) {
  EXPECT_EQ(tokenizer_->kind(), "tokenizer.json");
  for (const auto& c : (*cases_)["cases"]) {
    const std::vector<int> want = c["ids"];
    absl::StatusOr<std::vector<int>> got = tokenizer_->Encode(c["text"].get<std::string>());
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(*got, want) << c["text"];
  }
}

// A rendered chat template is encoded as apply_chat_template encodes it (add_special_tokens
// False): no BOS added, and the BOS the template wrote as text becomes the one BOS id, so the
// rendered "<|begin_of_text|>" + text gives the ids the prompt path gives the text alone.
TEST_F(HfTokenizerServerTest, RenderedChatTextAddsNoSpecialTokensAndReadsThoseWritten) {
  for (const auto& c : (*cases_)["cases"]) {
    const std::string text = c["text"];
    const std::vector<int> plain = c["ids_plain"], with_bos = c["ids"];
    absl::StatusOr<std::vector<int>> got = tokenizer_->EncodeRendered(text);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(*got, plain) << text;
    got = tokenizer_->EncodeRendered("<|begin_of_text|>" + text);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(*got, with_bos) << text;
  }
}

// The streaming path's pieces (TokenBytes into Utf8Stream, as GenerateReactor does) on a
// prompt whose characters the trained vocabulary splits across tokens.
TEST_F(HfTokenizerServerTest, CharactersSplitAcrossTokensStreamWhole) {
  const std::string text = (*cases_)["cases"][1]["text"];
  const std::vector<int> ids = (*cases_)["cases"][1]["ids_plain"];
  Utf8Stream stream;
  std::string streamed;
  int split = 0;
  for (int id : ids) {
    const std::string piece = stream.Push(tokenizer_->TokenBytes(id));
    if (stream.pending_bytes() > 0) ++split;
    streamed += piece;
  }
  streamed += stream.Flush();
  EXPECT_EQ(streamed, text);
  EXPECT_EQ(streamed, HfDecode(ids));
  EXPECT_GT(split, 0) << "no character of \"" << text << "\" was split across tokens";
}

TEST_F(HfTokenizerServerTest, ServerEncodesTextAndStreamsTheDecodeOfItsTokens) {
  ServerConfig config = TinyConfig();
  config.engine.model = *dir_;
  std::unique_ptr<TestServer> server = StartServer(config);
  ASSERT_NE(server, nullptr);
  {
    grpc::ClientContext ctx;
    v1::ServerInfo info;
    ASSERT_TRUE(server->stub->GetServerInfo(&ctx, v1::GetServerInfoRequest(), &info).ok());
    EXPECT_TRUE(info.model().has_text_tokenizer());
    EXPECT_EQ(info.model().tokenizer(), "tokenizer.json");
  }
  int held_back = 0;  // deltas whose token left an unfinished UTF-8 character
  for (const auto& c : (*cases_)["cases"]) {
    const std::vector<int> ids = c["ids"];
    v1::GenerateRequest text_req;
    text_req.set_prompt_text(c["text"].get<std::string>());
    text_req.set_max_tokens(48);
    text_req.set_ignore_eos(true);
    text_req.set_temperature(1.0f);
    text_req.set_seed(7);
    v1::GenerateRequest ids_req = text_req;
    ids_req.clear_prompt_text();
    for (int id : ids) ids_req.add_prompt_token_ids(id);

    const StreamResult a = RunStream(server->stub.get(), text_req, In(std::chrono::seconds(120)));
    const StreamResult b = RunStream(server->stub.get(), ids_req, In(std::chrono::seconds(120)));
    ASSERT_TRUE(a.status.ok()) << a.status.error_message();
    ASSERT_TRUE(b.status.ok()) << b.status.error_message();
    ASSERT_TRUE(a.final_message.has_value());
    EXPECT_EQ(a.final_message->usage().prompt_tokens(), static_cast<int>(ids.size()));
    ASSERT_EQ(a.tokens.size(), 48u);
    EXPECT_EQ(a.tokens, b.tokens) << "prompt_text and its ids from `tokenizers` must generate "
                                     "the same seeded stream: "
                                  << c["text"];
    EXPECT_EQ(a.text, HfDecode(a.tokens)) << c["text"];
    for (const v1::TokenDelta& d : a.deltas) {
      if (d.text().empty() && !tokenizer_->TokenBytes(d.token_ids(0)).empty()) ++held_back;
    }
  }
  std::cout << "deltas that held back an unfinished UTF-8 character: " << held_back << "\n";
}

TEST_F(HfTokenizerServerTest, TokenizerConfigAddBosTokenDecidesOverThePostProcessor) {
  const std::string d = *dir_ + "/no_bos";
  fs::create_directories(d);
  fs::copy_file(*dir_ + "/tokenizer.json", d + "/tokenizer.json");
  std::ofstream(d + "/tokenizer_config.json")
      << R"({"add_bos_token": false, "bos_token": "<|begin_of_text|>"})";
  absl::StatusOr<std::unique_ptr<TextTokenizer>> t = LoadTextTokenizer(d, false);
  ASSERT_TRUE(t.ok()) << t.status();
  const auto& c = (*cases_)["cases"][0];
  const std::vector<int> want = c["ids_plain"];
  EXPECT_EQ(*(*t)->Encode(c["text"].get<std::string>()), want);

  std::ofstream(d + "/tokenizer_config.json")
      << R"({"add_bos_token": true, "bos_token": {"content": "<|begin_of_text|>"}})";
  t = LoadTextTokenizer(d, false);
  ASSERT_TRUE(t.ok()) << t.status();
  const std::vector<int> with_bos = c["ids"];
  EXPECT_EQ(*(*t)->Encode(c["text"].get<std::string>()), with_bos);

  std::ofstream(d + "/tokenizer_config.json") << R"({"add_bos_token": true, "bos_token": "<s>"})";
  t = LoadTextTokenizer(d, false);
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(t.status().message(), HasSubstr("bos_token \"<s>\" is not a token"));
}

TEST_F(HfTokenizerServerTest, UnreadableTokenizerStopsTheStartUnlessSkipped) {
  const std::string d = *dir_ + "/roberta";
  fs::create_directories(d);
  nlohmann::json j = nlohmann::json::parse(std::ifstream(*dir_ + "/tokenizer.json"));
  j["post_processor"] = {{"type", "RobertaProcessing"}};
  std::ofstream(d + "/tokenizer.json") << j.dump();
  for (const char* f : {"config.json", "model.safetensors"}) {
    fs::copy_file(*dir_ + "/" + f, d + "/" + f);
  }
  ServerConfig config = TinyConfig();
  config.engine.model = d;
  ServerApp app(config);
  ASSERT_TRUE(app.StartListening().ok());
  const absl::Status s = app.LoadEngine();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(s.message(), HasSubstr("post_processor RobertaProcessing"));
  EXPECT_THAT(s.message(), HasSubstr("--skip_tokenizer_init"));
  EXPECT_EQ(app.engine(), nullptr);

  absl::StatusOr<std::unique_ptr<TextTokenizer>> skipped = LoadTextTokenizer(d, true);
  ASSERT_TRUE(skipped.ok());
  EXPECT_EQ(*skipped, nullptr);
}

// A tokenizer with more ids than the model's embedding: the start warns, and text that
// encodes to an id past vocab_size is refused naming prompt_text (the engine named prompt[i],
// a field the request never set); text below it is served.
TEST_F(HfTokenizerServerTest, TextPastTheModelsVocabularyIsRefusedByName) {
  const std::string text = (*cases_)["cases"][0]["text"];
  absl::StatusOr<std::vector<int>> ids = tokenizer_->Encode(text);
  ASSERT_TRUE(ids.ok()) << ids.status();
  const int max_id = *std::max_element(ids->begin(), ids->end());
  const int bos = (*cases_)["bos"];
  ASSERT_GT(max_id, bos + 1);
  const std::string d = *dir_ + "/small_vocab";
  fs::create_directories(d);
  ModelConfig c = *PresetConfig("tiny");
  c.name = "hf-tiny-small-vocab";
  c.vocab_size = max_id;  // the prompt's highest id is one past the model's last
  c.bos_token_id = bos;
  c.eos_token_id = bos;
  absl::StatusOr<ModelWeights> w = RandomWeights(c, 43);
  ASSERT_TRUE(w.ok()) << w.status();
  ASSERT_TRUE(SaveHfCheckpoint(*w, d).ok());
  for (const char* f : {"tokenizer.json", "tokenizer_config.json"}) {
    if (fs::exists(*dir_ + "/" + f)) fs::copy_file(*dir_ + "/" + f, d + "/" + f);
  }
  ServerConfig config = TinyConfig();
  config.engine.model = d;
  ::testing::internal::CaptureStderr();
  std::unique_ptr<TestServer> server = StartServer(config);
  const std::string log = ::testing::internal::GetCapturedStderr();
  ASSERT_NE(server, nullptr);
  EXPECT_THAT(log, HasSubstr(absl::StrCat("but the model's vocab_size is ", max_id)));

  v1::GenerateRequest req;
  req.set_prompt_text(text);
  req.set_max_tokens(4);
  StreamResult r = RunStream(server->stub.get(), req, In(std::chrono::seconds(60)));
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(r.status.error_message(), HasSubstr("prompt_text: token "));
  EXPECT_THAT(r.status.error_message(),
              HasSubstr(absl::StrCat("encodes to id ", max_id, ", past the model's vocab_size")));

  req.set_prompt_text("a");  // one byte: BOS and a base-alphabet id
  ids = tokenizer_->Encode("a");
  ASSERT_TRUE(ids.ok());
  ASSERT_LT(*std::max_element(ids->begin(), ids->end()), max_id);
  r = RunStream(server->stub.get(), req, In(std::chrono::seconds(60)));
  EXPECT_TRUE(r.status.ok()) << r.status.error_message();
}

// A template's special-token id past int32 became a small id (2^32 + 5 read as BOS 5); a
// tokenizer.json nested 100k deep overflowed the stack. Both are refused, naming the file.
TEST_F(HfTokenizerServerTest, TemplateIdsAndNestingPastTheirRangeAreRefused) {
  const std::string d = *dir_ + "/bad_template";
  fs::create_directories(d);
  nlohmann::json j = nlohmann::json::parse(std::ifstream(*dir_ + "/tokenizer.json"));
  j["post_processor"] = {
      {"type", "TemplateProcessing"},
      {"single",
       {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
        {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
      {"special_tokens",
       {{"<s>", {{"id", "<s>"}, {"ids", {4294967301ull}}, {"tokens", {"<s>"}}}}}}};
  std::ofstream(d + "/tokenizer.json") << j.dump();
  absl::StatusOr<std::unique_ptr<TextTokenizer>> t = LoadTextTokenizer(d, false);
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(t.status().message(), HasSubstr("special token <s> has id 4294967301"));

  j = nlohmann::json::parse(std::ifstream(*dir_ + "/tokenizer.json"));
  std::string text = j.dump();
  text.insert(1, "\"unused\": " + std::string(100000, '[') + std::string(100000, ']') + ", ");
  std::ofstream(d + "/tokenizer.json") << text;
  t = LoadTextTokenizer(d, false);
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(t.status().message(), HasSubstr("nests arrays and objects 100001 deep"));
  EXPECT_THAT(t.status().message(), HasSubstr(d + "/tokenizer.json"));
}

}  // namespace
}  // namespace saturn::testing
