// Tests for engine/model/model_config.h: preset shapes and parameter counts, validation errors, and
// Hugging Face config.json parsing (Llama-3.2-1B as published, unsupported architectures,
// missing fields).
#include "engine/model/model_config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

namespace saturn {
namespace {

using ::testing::HasSubstr;

// Llama-3.2-1B-Instruct's config.json as published (eos is a list there).
constexpr char kLlama32Config[] = R"({
  "architectures": ["LlamaForCausalLM"],
  "attention_bias": false,
  "attention_dropout": 0.0,
  "bos_token_id": 128000,
  "eos_token_id": [128001, 128008, 128009],
  "head_dim": 64,
  "hidden_act": "silu",
  "hidden_size": 2048,
  "initializer_range": 0.02,
  "intermediate_size": 8192,
  "max_position_embeddings": 131072,
  "mlp_bias": false,
  "model_type": "llama",
  "num_attention_heads": 32,
  "num_hidden_layers": 16,
  "num_key_value_heads": 8,
  "pretraining_tp": 1,
  "rms_norm_eps": 1e-05,
  "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                   "original_max_position_embeddings": 8192, "rope_type": "llama3"},
  "rope_theta": 500000.0,
  "tie_word_embeddings": true,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.45.0.dev0",
  "use_cache": true,
  "vocab_size": 128256
})";

// The fields that fix a model's tensor shapes, in ModelConfig's order.
struct Shape {
  int vocab_size, hidden_size, intermediate_size, num_layers, num_heads, num_kv_heads, head_dim,
      max_position_embeddings;
};

void ExpectShape(const ModelConfig& c, const Shape& want) {
  EXPECT_EQ(c.vocab_size, want.vocab_size);
  EXPECT_EQ(c.hidden_size, want.hidden_size);
  EXPECT_EQ(c.intermediate_size, want.intermediate_size);
  EXPECT_EQ(c.num_layers, want.num_layers);
  EXPECT_EQ(c.num_heads, want.num_heads);
  EXPECT_EQ(c.num_kv_heads, want.num_kv_heads);
  EXPECT_EQ(c.head_dim, want.head_dim);
  EXPECT_EQ(c.max_position_embeddings, want.max_position_embeddings);
}

TEST(PresetConfigTest, TinyShape) {
  auto c = PresetConfig("tiny");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->name, "tiny");
  ExpectShape(*c, {4096, 256, 688, 4, 8, 2, 32, 1024});
  EXPECT_TRUE(c->tie_word_embeddings);
  EXPECT_EQ(c->bos_token_id, 1);
  EXPECT_EQ(c->eos_token_id, 2);
  EXPECT_FLOAT_EQ(c->rope_theta, 10000.0f);
  EXPECT_TRUE(c->Validate().ok());
}

TEST(PresetConfigTest, ParameterCounts) {
  auto tiny = PresetConfig("tiny");
  auto small = PresetConfig("small");
  auto big = PresetConfig("1b");
  ASSERT_TRUE(tiny.ok() && small.ok() && big.ok());
  EXPECT_GE(tiny->NumParameters(), 1'000'000);
  EXPECT_LE(tiny->NumParameters(), 10'000'000);
  EXPECT_GE(small->NumParameters(), 90'000'000);
  EXPECT_LE(small->NumParameters(), 110'000'000);
  EXPECT_NEAR(static_cast<double>(big->NumParameters()), 1.236e9, 0.05 * 1.236e9);
  EXPECT_FLOAT_EQ(big->rope_theta, 500000.0f);
  for (const auto* c : {&*tiny, &*small, &*big}) EXPECT_TRUE(c->Validate().ok()) << c->name;
}

TEST(PresetConfigTest, ExactCountForHandComputedShape) {
  ModelConfig c = *PresetConfig("tiny");
  // embedding 4096*256; per layer qkv (256+2*64)*256, o 256*256, gate/up/down 3*688*256,
  // norms 2*256; final norm 256.
  const int64_t per_layer = 384 * 256 + 256 * 256 + 3 * 688 * 256 + 2 * 256;
  EXPECT_EQ(c.NumParameters(), 4096 * 256 + 4 * per_layer + 256);
  c.tie_word_embeddings = false;
  EXPECT_EQ(c.NumParameters(), 2 * 4096 * 256 + 4 * per_layer + 256);
}

TEST(PresetConfigTest, UnknownPresetListsValidNames) {
  auto c = PresetConfig("huge");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(c.status().message(), HasSubstr("huge"));
  EXPECT_THAT(c.status().message(), HasSubstr("tiny"));
  EXPECT_THAT(c.status().message(), HasSubstr("small"));
  EXPECT_THAT(c.status().message(), HasSubstr("1b"));
}

TEST(ValidateTest, ErrorsNameTheField) {
  const ModelConfig good = *PresetConfig("tiny");
  struct Case {
    void (*mutate)(ModelConfig&);
    const char* field;
  };
  const Case cases[] = {
      {[](ModelConfig& c) { c.vocab_size = 0; }, "vocab_size"},
      {[](ModelConfig& c) { c.hidden_size = -1; }, "hidden_size"},
      {[](ModelConfig& c) { c.intermediate_size = 0; }, "intermediate_size"},
      {[](ModelConfig& c) { c.num_layers = 0; }, "num_layers"},
      {[](ModelConfig& c) { c.num_heads = 0; }, "num_heads"},
      {[](ModelConfig& c) { c.num_kv_heads = 0; }, "num_kv_heads"},
      {[](ModelConfig& c) { c.num_kv_heads = 3; }, "num_kv_heads"},
      {[](ModelConfig& c) { c.num_kv_heads = 16; }, "num_kv_heads"},
      {[](ModelConfig& c) { c.head_dim = 0; }, "head_dim"},
      {[](ModelConfig& c) { c.head_dim = 33; }, "head_dim"},
      {[](ModelConfig& c) { c.max_position_embeddings = 0; }, "max_position_embeddings"},
      {[](ModelConfig& c) { c.rms_norm_eps = 0.0f; }, "rms_norm_eps"},
      {[](ModelConfig& c) { c.rope_theta = -1.0f; }, "rope_theta"},
      {[](ModelConfig& c) { c.eos_token_id = 4096; }, "eos_token_id"},
      {[](ModelConfig& c) { c.bos_token_id = -1; }, "bos_token_id"},
  };
  for (const Case& k : cases) {
    ModelConfig c = good;
    k.mutate(c);
    absl::Status s = c.Validate();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << k.field;
    EXPECT_THAT(s.message(), HasSubstr(k.field));
  }
}

TEST(ParseHfConfigTest, Llama32OneB) {
  auto c = ParseHfConfig(kLlama32Config, "/models/llama-3.2-1b");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->name, "/models/llama-3.2-1b");
  ExpectShape(*c, {128256, 2048, 8192, 16, 32, 8, 64, 131072});
  EXPECT_FLOAT_EQ(c->rms_norm_eps, 1e-5f);
  EXPECT_FLOAT_EQ(c->rope_theta, 500000.0f);
  EXPECT_TRUE(c->tie_word_embeddings);
  EXPECT_EQ(c->bos_token_id, 128000);
  EXPECT_EQ(c->eos_token_id, 128001);  // the first of the list; the others end requests too
  EXPECT_EQ(c->extra_eos_token_ids, (std::vector<int>{128008, 128009}));
  EXPECT_EQ(c->NumParameters(), PresetConfig("1b")->NumParameters());
  EXPECT_FLOAT_EQ(c->rope_llama3_factor, 32.0f);
  EXPECT_FLOAT_EQ(c->rope_low_freq_factor, 1.0f);
  EXPECT_FLOAT_EQ(c->rope_high_freq_factor, 4.0f);
  EXPECT_EQ(c->rope_original_max_position, 8192);
  EXPECT_TRUE(c->Rope().scaled());
}

TEST(ParseHfConfigTest, DefaultsFollowHuggingFace) {
  auto c = ParseHfConfig(R"({"model_type": "llama", "vocab_size": 1000, "hidden_size": 128,
      "intermediate_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4,
      "max_position_embeddings": 512, "eos_token_id": 7})",
                         "x");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->num_kv_heads, 4);
  EXPECT_EQ(c->head_dim, 32);
  EXPECT_FLOAT_EQ(c->rope_theta, 10000.0f);
  EXPECT_FALSE(c->tie_word_embeddings);
  EXPECT_EQ(c->eos_token_id, 7);
}

TEST(ParseHfConfigTest, UnsupportedArchitecture) {
  auto c = ParseHfConfig(R"({"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2",
      "vocab_size": 50257, "n_embd": 768, "n_layer": 12, "n_head": 12})",
                         "gpt2");
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(), HasSubstr("unsupported architecture GPT2LMHeadModel"));
  EXPECT_THAT(c.status().message(), HasSubstr("Llama"));
}

TEST(ParseHfConfigTest, MissingFieldsAreNamed) {
  for (const char* field : {"vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                            "num_attention_heads", "max_position_embeddings"}) {
    std::string text = kLlama32Config;
    const std::string key = std::string("\"") + field + "\"";
    const size_t pos = text.find(key);
    ASSERT_NE(pos, std::string::npos) << field;
    text.replace(pos, key.size(), "\"renamed_away\"");
    auto c = ParseHfConfig(text, "x");
    ASSERT_FALSE(c.ok()) << field;
    EXPECT_THAT(c.status().message(), HasSubstr(field));
  }
}

TEST(ParseHfConfigTest, MalformedInputIsAnErrorNotACrash) {
  for (const char* text : {"", "{", "[1, 2]", "null", R"({"model_type": "llama",
       "vocab_size": "many"})",
                           R"({"model_type": "llama", "vocab_size": 10, "hidden_size": 64,
       "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 3,
       "max_position_embeddings": 64, "eos_token_id": 2})"}) {
    auto c = ParseHfConfig(text, "x");
    EXPECT_FALSE(c.ok()) << text;
  }
}

// kLlama32Config with `field` set to `value` (JSON text), or removed when value is empty.
std::string WithField(const std::string& field, const std::string& value) {
  nlohmann::json j = nlohmann::json::parse(kLlama32Config);
  if (value.empty()) {
    j.erase(field);
  } else {
    j[field] = nlohmann::json::parse(value);
  }
  return j.dump();
}

// Each of these overflowed the stack (nested JSON), wrapped an id past int32 into a small one
// or wrapped a size into a negative one: now refused, naming the field.
TEST(ParseHfConfigTest, NestingAndIdsPastTheirRangeAreRefused) {
  const std::string deep = std::string(200000, '[') + std::string(200000, ']');
  absl::StatusOr<ModelConfig> c =
      ParseHfConfig(WithField("zzz", "0").replace(1, 0, "\"d\": " + deep + ", "), "x");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("limit is 64"), std::string::npos) << c.status();
  for (const char* eos : {"4294967456", "[2, 4294967296]", "[2, -1]", "-3"}) {
    c = ParseHfConfig(WithField("eos_token_id", eos), "x");
    ASSERT_FALSE(c.ok()) << eos;
    EXPECT_NE(c.status().message().find("eos_token_id"), std::string::npos) << c.status();
  }
  c = ParseHfConfig(WithField("eos_token_id", "[128001, 200000]"), "x");  // past vocab_size
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("eos_token_id"), std::string::npos) << c.status();
  c = ParseHfConfig(WithField("vocab_size", "18446744073709551615"), "x");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("18446744073709551615"), std::string::npos) << c.status();
}

// Issue 10 item 7: each of these loaded silently and computed wrongly before.
TEST(ParseHfConfigTest, FieldsThatChangeTheMathAreRefusedByName) {
  const struct {
    const char* field;
    const char* value;
    const char* says;
  } kRefused[] = {
      {"hidden_act", R"("gelu")", "hidden_act"},
      {"hidden_act", R"("relu")", "hidden_act"},
      {"attention_bias", "true", "attention_bias"},
      {"mlp_bias", "true", "mlp_bias"},
      {"rope_scaling", R"({"type": "linear", "factor": 4.0})", "rope_scaling type \"linear\""},
      {"rope_scaling", R"({"rope_type": "dynamic", "factor": 2.0})", "\"dynamic\""},
      {"rope_scaling", R"({"rope_type": "yarn", "factor": 4.0,
                           "original_max_position_embeddings": 4096})",
       "\"yarn\""},
      {"rope_scaling", R"({"factor": 4.0})", "<missing>"},
      {"rope_scaling", R"({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                           "high_freq_factor": 4.0, "original_max_position_embeddings": 8192,
                           "attention_factor": 2.0})",
       "rope_scaling.attention_factor"},
      {"sliding_window", "4096", "sliding_window"},
      {"use_sliding_window", "true", "use_sliding_window"},
      {"partial_rotary_factor", "0.5", "partial_rotary_factor"},
      {"quantization_config", R"({"quant_method": "gptq", "bits": 4})", "quantization_config"},
      {"auto_map", R"({"AutoModelForCausalLM": "modeling.Custom"})", "auto_map"},
      {"is_encoder_decoder", "true", "is_encoder_decoder"},
      {"some_new_knob", "3", "some_new_knob"},
      {"model_type", R"("mistral")", "mistral"},
      {"architectures", R"(["LlamaForCausalLM", "MistralForCausalLM"])", "MistralForCausalLM"},
  };
  for (const auto& r : kRefused) {
    auto c = ParseHfConfig(WithField(r.field, r.value), "x");
    ASSERT_FALSE(c.ok()) << r.field << " = " << r.value;
    EXPECT_EQ(c.status().code(), absl::StatusCode::kUnimplemented) << c.status();
    EXPECT_THAT(c.status().message(), HasSubstr(r.says)) << r.field;
  }
}

TEST(ParseHfConfigTest, DefaultValuedAndHarmlessFieldsStillLoad) {
  const struct {
    const char* field;
    const char* value;
  } kAccepted[] = {
      {"hidden_act", R"("silu")"},
      {"attention_bias", "false"},
      {"mlp_bias", "null"},
      {"rope_scaling", "null"},
      {"rope_scaling", R"({"rope_type": "default"})"},
      {"sliding_window", "null"},
      {"use_sliding_window", "false"},
      {"pretraining_tp", "2"},
      {"attention_dropout", "0.1"},
      {"_name_or_path", R"("meta-llama/Llama-3.2-1B")"},
      {"pad_token_id", "0"},
      {"temperature", "0.6"},
      {"partial_rotary_factor", "1"},
      {"rope_scaling", ""},  // absent
      {"head_dim", ""},
      {"hidden_act", ""},
  };
  for (const auto& a : kAccepted) {
    auto c = ParseHfConfig(WithField(a.field, a.value), "x");
    EXPECT_TRUE(c.ok()) << a.field << " = " << a.value << ": " << c.status();
  }
}

TEST(ParseHfConfigTest, Llama3RopeScalingFieldsAreCheckedAndNamed) {
  for (const char* key :
       {"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"}) {
    nlohmann::json j = nlohmann::json::parse(kLlama32Config);
    j["rope_scaling"].erase(key);
    auto c = ParseHfConfig(j.dump(), "x");
    ASSERT_FALSE(c.ok()) << key;
    EXPECT_THAT(c.status().message(), HasSubstr(key));
  }
  nlohmann::json j = nlohmann::json::parse(kLlama32Config);
  j["rope_scaling"]["low_freq_factor"] = 8.0;  // above high_freq_factor
  EXPECT_FALSE(ParseHfConfig(j.dump(), "x").ok());
  j = nlohmann::json::parse(kLlama32Config);
  j["rope_scaling"]["type"] = "llama3";  // the older key spelling
  j["rope_scaling"].erase("rope_type");
  EXPECT_TRUE(ParseHfConfig(j.dump(), "x").ok());
}

// Llama-3.2-1B's RoPE frequencies against float64 values computed outside this code base
// (Python's float64 arithmetic on transformers' _compute_llama3_parameters formula): pair i of
// head_dim 64, theta 500000, factor 32, low 1, high 4, original context 8192. Pairs 15-17
// fall in the smoothed band, 18+ are divided by the factor, 0-14 are unchanged.
// Meta-Llama-3-8B-Instruct: config.json's eos is <|end_of_text|> alone; its
// generation_config.json (as published) adds <|eot_id|>, which ends every chat turn.
TEST(MergeGenerationConfigTest, EosIdsJoinTheOnesThatEndARequest) {
  nlohmann::json j = nlohmann::json::parse(kLlama32Config);
  j["eos_token_id"] = 128001;
  absl::StatusOr<ModelConfig> c = ParseHfConfig(j.dump(), "llama-3-8b-instruct");
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_TRUE(c->extra_eos_token_ids.empty());
  ASSERT_TRUE(MergeGenerationConfig(R"({"bos_token_id": 128000, "do_sample": true,
      "eos_token_id": [128001, 128009], "max_length": 4096, "temperature": 0.6, "top_p": 0.9,
      "transformers_version": "4.40.0.dev0"})",
                                    &*c)
                  .ok());
  EXPECT_EQ(c->eos_token_id, 128001);
  EXPECT_EQ(c->extra_eos_token_ids, (std::vector<int>{128009}));
  // Merging again adds nothing twice; a single id and null are accepted.
  ASSERT_TRUE(MergeGenerationConfig(R"({"eos_token_id": [128009, 128008]})", &*c).ok());
  EXPECT_EQ(c->extra_eos_token_ids, (std::vector<int>{128009, 128008}));
  ASSERT_TRUE(MergeGenerationConfig(R"({"eos_token_id": null})", &*c).ok());
  ASSERT_TRUE(MergeGenerationConfig(R"({})", &*c).ok());
  EXPECT_EQ(c->extra_eos_token_ids, (std::vector<int>{128009, 128008}));
}

TEST(MergeGenerationConfigTest, BrokenFilesAreRefusedByName) {
  absl::StatusOr<ModelConfig> c = ParseHfConfig(kLlama32Config, "llama");
  ASSERT_TRUE(c.ok()) << c.status();
  const struct {
    const char* text;
    const char* expect;
  } cases[] = {
      {"{", "generation_config.json: not valid JSON"},
      {"[1]", "generation_config.json: not an object"},
      {R"({"eos_token_id": "eos"})",
       "generation_config.json: field eos_token_id must be an integer"},
      {R"({"eos_token_id": [1, 4294967297]})", "not a token id (0 to 2^31 - 1)"},
      {R"({"eos_token_id": 128256})", "eos_token_id 128256 outside [0, vocab_size=128256)"},
  };
  for (const auto& k : cases) {
    ModelConfig copy = *c;
    const absl::Status s = MergeGenerationConfig(k.text, &copy);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << k.text;
    EXPECT_THAT(s.message(), HasSubstr(k.expect)) << k.text;
    EXPECT_EQ(copy.extra_eos_token_ids, c->extra_eos_token_ids) << k.text;
  }
}

TEST(RopeFrequenciesTest, Llama3ScalingMatchesAnIndependentFloat64Reference) {
  auto c = ParseHfConfig(kLlama32Config, "x");
  ASSERT_TRUE(c.ok()) << c.status();
  const RopeParams rope = c->Rope();
  const struct {
    int i;
    double base, scaled;
  } kWant[] = {
      {0, 1.0, 1.0},
      {8, 0.03760603093086393, 0.03760603093086393},
      {14, 0.003211445994752591, 0.003211445994752591},
      {15, 0.0021311195369119653, 0.001290547928209264},
      {16, 0.001414213562373095, 0.00042955679655936815},
      {17, 0.0009384738703573802, 9.70828780262767e-05},
      {18, 0.000622772421914596, 1.9461638184831125e-05},
      {20, 0.0002742481756762073, 8.570255489881478e-06},
      {31, 3.013858152139171e-06, 9.41830672543491e-08},
  };
  for (const auto& w : kWant) {
    // f32 inputs (theta, factors) leave the result within a few ulps of f32.
    EXPECT_NEAR(RopeInvFreq(RopeParams(c->rope_theta), w.i, 64), w.base, 1e-6 * w.base) << w.i;
    EXPECT_NEAR(RopeInvFreq(rope, w.i, 64), w.scaled, 1e-6 * w.scaled) << w.i;
    EXPECT_NEAR(ScaleRopeInvFreq<float>(rope, static_cast<float>(w.base)), w.scaled,
                1e-5 * w.scaled)
        << w.i;
  }
}

}  // namespace
}  // namespace saturn
