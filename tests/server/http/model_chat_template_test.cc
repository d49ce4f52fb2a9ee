// Where /v1/chat/completions finds a model's chat template (server/http/model_chat_template.h):
// a checkpoint's chat_template.jinja or tokenizer_config.json (a string or named templates) with
// its bos/eos tokens, a GGUF file's tokenizer.chat_template with its token texts, --chat_template
// in place of either; and the refusals: a preset, none in the files, a template that does not
// parse, a config nested too deep to read.
#include "server/http/model_chat_template.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "server/http/openai_protocol.h"
#include "tests/engine/model/gguf_writer.h"

namespace saturn {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

constexpr char kTemplate[] =
    "{{ bos_token }}{% for m in messages %}<{{ m.role }}>{{ m.content }}{{ eos_token }}"
    "{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}";

std::string TempDir() {
  std::string dir = (fs::path(::testing::TempDir()) / "chat_XXXXXX").string();
  EXPECT_NE(mkdtemp(dir.data()), nullptr);
  return dir;
}

std::string Render(const ModelChatTemplate& t) {
  absl::StatusOr<std::string> s =
      t.tmpl.Render({{"user", "hi"}}, /*add_generation_prompt=*/true, t.bos_token, t.eos_token);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *s : "";
}

TEST(ModelChatTemplateTest, APresetHasNoneUnlessAFileIsGiven) {
  absl::StatusOr<ModelChatTemplate> t = LoadModelChatTemplate("small");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(HttpStatus(t.status()), 400);
  EXPECT_THAT(t.status().message(), HasSubstr("has no chat template"));
  EXPECT_THAT(t.status().message(), HasSubstr("--chat_template"));
  const std::string dir = TempDir();
  std::ofstream(dir + "/t.jinja") << kTemplate;
  t = LoadModelChatTemplate("small", dir + "/t.jinja");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(Render(*t), "<user>hi<assistant>");  // a preset has no special tokens
  std::ofstream(dir + "/bad.jinja") << "{% for m in messages %}";
  t = LoadModelChatTemplate("small", dir + "/bad.jinja");
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(t.status().message(), HasSubstr("--chat_template"));
  EXPECT_THAT(t.status().message(), HasSubstr("line 1"));
  EXPECT_FALSE(LoadModelChatTemplate("small", dir + "/missing.jinja").ok());
  fs::remove_all(dir);
}

TEST(ModelChatTemplateTest, ACheckpointsTemplateAndSpecialTokens) {
  const std::string dir = TempDir();
  nlohmann::json config = {{"chat_template", kTemplate},
                           {"bos_token", "<s>"},
                           {"eos_token", {{"content", "</s>"}, {"special", true}}}};
  std::ofstream(dir + "/tokenizer_config.json") << config.dump();
  absl::StatusOr<ModelChatTemplate> t = LoadModelChatTemplate(dir);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(Render(*t), "<s><user>hi</s><assistant>");
  EXPECT_THAT(t->origin, HasSubstr("tokenizer_config.json"));
  // Named templates: the default one.
  config["chat_template"] = {{{"name", "tool_use"}, {"template", "T"}},
                             {{"name", "default"}, {"template", "D{{ bos_token }}"}}};
  std::ofstream(dir + "/tokenizer_config.json") << config.dump();
  t = LoadModelChatTemplate(dir);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(Render(*t), "D<s>");
  // chat_template.jinja beside it wins, as in transformers; the config's tokens still fill it.
  std::ofstream(dir + "/chat_template.jinja") << "J{{ eos_token }}";
  t = LoadModelChatTemplate(dir);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(Render(*t), "J</s>");
  // --chat_template in place of both, with the checkpoint's tokens.
  std::ofstream(dir + "/flag.jinja") << "F{{ bos_token }}";
  t = LoadModelChatTemplate(dir, dir + "/flag.jinja");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(Render(*t), "F<s>");
  // A template Saturn cannot parse: refused, naming where it came from and the place.
  std::ofstream(dir + "/chat_template.jinja") << "{{ messages | nosuchfilter }}";
  t = LoadModelChatTemplate(dir);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(HttpStatus(t.status()), 400);
  EXPECT_THAT(t.status().message(), HasSubstr("chat_template.jinja"));
  EXPECT_THAT(t.status().message(), HasSubstr("nosuchfilter"));
  fs::remove(dir + "/chat_template.jinja");
  // None in the files, and a config nested too deep to parse safely.
  std::ofstream(dir + "/tokenizer_config.json") << R"({"bos_token": "<s>"})";
  t = LoadModelChatTemplate(dir);
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(t.status().message(), HasSubstr("has no chat template"));
  std::ofstream(dir + "/tokenizer_config.json")
      << "{\"x\": " << std::string(200000, '[') << std::string(200000, ']') << "}";
  t = LoadModelChatTemplate(dir);
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(t.status().message(), HasSubstr("nested deeper"));
  fs::remove_all(dir);
}

TEST(ModelChatTemplateTest, AGgufFilesTemplateKeyAndTokenTexts) {
  const std::string with = (fs::path(::testing::TempDir()) / "chat-with.gguf").string();
  const std::string without = (fs::path(::testing::TempDir()) / "chat-without.gguf").string();
  testing_gguf::Writer a;
  a.Str("general.architecture", "llama");
  a.Str("tokenizer.chat_template", kTemplate);
  a.StrArray("tokenizer.ggml.tokens", {"<unk>", "<|begin|>", "<|end|>", "a"});
  a.U32("tokenizer.ggml.bos_token_id", 1);
  a.U32("tokenizer.ggml.eos_token_id", 2);
  a.Save(with);
  testing_gguf::Writer b;
  b.Str("general.architecture", "llama");
  b.Save(without);
  absl::StatusOr<ModelChatTemplate> t = LoadModelChatTemplate(with);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(Render(*t), "<|begin|><user>hi<|end|><assistant>");
  t = LoadModelChatTemplate(without);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(HttpStatus(t.status()), 400);
  EXPECT_THAT(t.status().message(), HasSubstr("GGUF file has no chat template"));
  fs::remove(with);
  fs::remove(without);
}

}  // namespace
}  // namespace saturn
