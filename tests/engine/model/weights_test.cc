// Tests for engine/model/weights.h: deterministic random init, and Hugging Face checkpoints the
// test writes itself (single file, two shards, BF16) loading back into exactly the fused layout;
// broken checkpoints give errors naming the tensor and file.
#include "engine/model/weights.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>

#include "engine/model/safetensors.h"

namespace saturn {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

double Std(const std::vector<float>& v) {
  double s = 0, s2 = 0;
  for (float x : v) s += x, s2 += double(x) * x;
  const double mean = s / v.size();
  return std::sqrt(s2 / v.size() - mean * mean);
}

// HF config.json text for `c`, written independently of the code under test.
std::string ConfigJson(const ModelConfig& c) {
  return "{\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"llama\", " +
         std::string("\"vocab_size\": ") + std::to_string(c.vocab_size) +
         ", \"hidden_size\": " + std::to_string(c.hidden_size) +
         ", \"intermediate_size\": " + std::to_string(c.intermediate_size) +
         ", \"num_hidden_layers\": " + std::to_string(c.num_layers) +
         ", \"num_attention_heads\": " + std::to_string(c.num_heads) +
         ", \"num_key_value_heads\": " + std::to_string(c.num_kv_heads) +
         ", \"head_dim\": " + std::to_string(c.head_dim) +
         ", \"max_position_embeddings\": " + std::to_string(c.max_position_embeddings) +
         ", \"rms_norm_eps\": 1e-05, \"rope_theta\": 10000.0, \"bos_token_id\": 1, " +
         "\"eos_token_id\": [2, 3], \"tie_word_embeddings\": " +
         (c.tie_word_embeddings ? "true" : "false") + "}";
}

// The unfused HF tensors of `w`, in F32.
std::vector<TensorToWrite> HfTensors(const ModelWeights& w) {
  const ModelConfig& c = w.config;
  const int64_t D = c.hidden_size, F = c.intermediate_size;
  const int64_t Q = c.num_heads * c.head_dim, KV = c.num_kv_heads * c.head_dim;
  std::vector<TensorToWrite> t;
  auto add = [&](const std::string& name, const std::vector<int64_t>& shape,
                 const std::vector<float>& src, int64_t offset) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    t.push_back({name, "F32", shape, {src.begin() + offset, src.begin() + offset + n}});
  };
  add("model.embed_tokens.weight", {c.vocab_size, D}, w.embedding, 0);
  for (int i = 0; i < c.num_layers; ++i) {
    const LayerWeights& l = w.layers[i];
    const std::string p = "model.layers." + std::to_string(i) + ".";
    add(p + "input_layernorm.weight", {D}, l.attn_norm, 0);
    add(p + "self_attn.q_proj.weight", {Q, D}, l.wqkv, 0);
    add(p + "self_attn.k_proj.weight", {KV, D}, l.wqkv, Q * D);
    add(p + "self_attn.v_proj.weight", {KV, D}, l.wqkv, (Q + KV) * D);
    add(p + "self_attn.o_proj.weight", {D, Q}, l.wo, 0);
    add(p + "post_attention_layernorm.weight", {D}, l.mlp_norm, 0);
    add(p + "mlp.gate_proj.weight", {F, D}, l.w_gate_up, 0);
    add(p + "mlp.up_proj.weight", {F, D}, l.w_gate_up, F * D);
    add(p + "mlp.down_proj.weight", {D, F}, l.w_down, 0);
  }
  add("model.norm.weight", {D}, w.final_norm, 0);
  if (!c.tie_word_embeddings) add("lm_head.weight", {c.vocab_size, D}, w.lm_head, 0);
  return t;
}

void ExpectSameWeights(const ModelWeights& a, const ModelWeights& b) {
  EXPECT_EQ(a.embedding, b.embedding);
  ASSERT_EQ(a.layers.size(), b.layers.size());
  for (size_t i = 0; i < a.layers.size(); ++i) {
    EXPECT_EQ(a.layers[i].attn_norm, b.layers[i].attn_norm) << i;
    EXPECT_EQ(a.layers[i].wqkv, b.layers[i].wqkv) << i;
    EXPECT_EQ(a.layers[i].wo, b.layers[i].wo) << i;
    EXPECT_EQ(a.layers[i].mlp_norm, b.layers[i].mlp_norm) << i;
    EXPECT_EQ(a.layers[i].w_gate_up, b.layers[i].w_gate_up) << i;
    EXPECT_EQ(a.layers[i].w_down, b.layers[i].w_down) << i;
  }
  EXPECT_EQ(a.final_norm, b.final_norm);
  EXPECT_EQ(a.lm_head, b.lm_head);
}

class WeightsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::path(::testing::TempDir()) / "weights_XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    config_ = *PresetConfig("tiny");
    config_.tie_word_embeddings = false;  // exercise lm_head too
    auto w = RandomWeights(config_, 42);
    ASSERT_TRUE(w.ok()) << w.status();
    weights_ = std::move(*w);
  }
  void TearDown() override { fs::remove_all(dir_); }

  void WriteConfig(const std::string& text) { std::ofstream(dir_ / "config.json") << text; }

  fs::path dir_;
  ModelConfig config_;
  ModelWeights weights_;
};

TEST(RandomWeightsTest, DeterministicFiniteAndScaled) {
  const ModelConfig c = *PresetConfig("tiny");
  auto a = RandomWeights(c, 7), b = RandomWeights(c, 7), other = RandomWeights(c, 8);
  ASSERT_TRUE(a.ok() && b.ok() && other.ok());
  ExpectSameWeights(*a, *b);
  EXPECT_NE(a->embedding, other->embedding);
  EXPECT_NE(a->layers[0].wqkv, other->layers[0].wqkv);

  const int64_t D = c.hidden_size, F = c.intermediate_size, Q = c.num_heads * c.head_dim;
  const int64_t KV = c.num_kv_heads * c.head_dim;
  ASSERT_EQ(a->embedding.size(), size_t(c.vocab_size * D));
  ASSERT_EQ(a->layers.size(), size_t(c.num_layers));
  EXPECT_TRUE(a->lm_head.empty());
  int64_t count = a->embedding.size() + a->final_norm.size();
  for (const LayerWeights& l : a->layers) {
    EXPECT_EQ(l.wqkv.size(), size_t((Q + 2 * KV) * D));
    EXPECT_EQ(l.w_gate_up.size(), size_t(2 * F * D));
    EXPECT_EQ(l.wo.size(), size_t(D * Q));
    EXPECT_EQ(l.w_down.size(), size_t(D * F));
    for (const auto* v : {&l.attn_norm, &l.mlp_norm}) {
      for (float x : *v) ASSERT_EQ(x, 1.0f);
    }
    for (const auto* v : {&l.wqkv, &l.wo, &l.w_gate_up, &l.w_down}) {
      for (float x : *v) ASSERT_TRUE(std::isfinite(x));
    }
    count += l.attn_norm.size() + l.wqkv.size() + l.wo.size() + l.mlp_norm.size() +
             l.w_gate_up.size() + l.w_down.size();
  }
  EXPECT_EQ(count, c.NumParameters());
  const double out_scale = 1.0 / std::sqrt(2.0 * c.num_layers);
  EXPECT_NEAR(Std(a->embedding), 2.0 / std::sqrt(D), 0.04 / std::sqrt(D));
  EXPECT_NEAR(Std(a->layers[1].wqkv), 1.0 / std::sqrt(D), 0.02 / std::sqrt(D));
  EXPECT_NEAR(Std(a->layers[1].w_gate_up), 1.0 / std::sqrt(D), 0.02 / std::sqrt(D));
  EXPECT_NEAR(Std(a->layers[1].wo), out_scale / std::sqrt(Q), 0.02 * out_scale / std::sqrt(Q));
  EXPECT_NEAR(Std(a->layers[1].w_down), out_scale / std::sqrt(F), 0.02 * out_scale / std::sqrt(F));
}

TEST(RandomWeightsTest, InvalidConfigIsAnError) {
  ModelConfig c = *PresetConfig("tiny");
  c.num_kv_heads = 3;
  EXPECT_FALSE(RandomWeights(c, 1).ok());
}

TEST_F(WeightsTest, LoadsSingleFileCheckpointExactly) {
  WriteConfig(ConfigJson(config_));
  ASSERT_TRUE(WriteSafetensors((dir_ / "model.safetensors").string(), HfTensors(weights_)).ok());
  auto loaded = LoadHfCheckpoint(dir_.string());
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->config.name, dir_.string());
  EXPECT_EQ(loaded->config.NumParameters(), config_.NumParameters());
  EXPECT_EQ(loaded->config.eos_token_id, 2);
  ExpectSameWeights(*loaded, weights_);
}

// generation_config.json's eos ids end requests too; a broken one is refused naming it.
TEST_F(WeightsTest, GenerationConfigEosIdsAreLoaded) {
  WriteConfig(ConfigJson(config_));
  ASSERT_TRUE(WriteSafetensors((dir_ / "model.safetensors").string(), HfTensors(weights_)).ok());
  std::ofstream(dir_ / "generation_config.json") << R"({"eos_token_id": [2, 7, 3, 9]})";
  auto loaded = LoadHfCheckpoint(dir_.string());
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->config.eos_token_id, 2);  // config.json's [2, 3], then the new ones
  EXPECT_EQ(loaded->config.extra_eos_token_ids, (std::vector<int>{3, 7, 9}));

  std::ofstream(dir_ / "generation_config.json") << R"({"eos_token_id": 4096})";
  loaded = LoadHfCheckpoint(dir_.string());
  ASSERT_FALSE(loaded.ok());
  EXPECT_THAT(loaded.status().message(),
              HasSubstr(dir_.string() + "/generation_config.json: eos_token_id 4096 outside"));
}

TEST_F(WeightsTest, LoadsTwoShardCheckpointExactly) {
  WriteConfig(ConfigJson(config_));
  std::vector<TensorToWrite> all = HfTensors(weights_), first, second;
  std::string map;
  for (size_t i = 0; i < all.size(); ++i) {
    const bool in_first = i < all.size() / 2;
    const char* shard =
        in_first ? "model-00001-of-00002.safetensors" : "model-00002-of-00002.safetensors";
    map += (map.empty() ? "" : ", ") + ("\"" + all[i].name + "\": \"" + shard + "\"");
    (in_first ? first : second).push_back(std::move(all[i]));
  }
  ASSERT_TRUE(WriteSafetensors((dir_ / "model-00001-of-00002.safetensors").string(), first).ok());
  ASSERT_TRUE(WriteSafetensors((dir_ / "model-00002-of-00002.safetensors").string(), second).ok());
  std::ofstream(dir_ / "model.safetensors.index.json")
      << "{\"metadata\": {\"total_size\": 0}, \"weight_map\": {" << map << "}}";
  auto loaded = LoadHfCheckpoint(dir_.string());
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ExpectSameWeights(*loaded, weights_);
}

TEST_F(WeightsTest, SaveHfCheckpointRoundTripsInBf16) {
  ASSERT_TRUE(SaveHfCheckpoint(weights_, dir_.string(), "BF16").ok());
  auto loaded = LoadHfCheckpoint(dir_.string());
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_FALSE(loaded->config.tie_word_embeddings);
  ASSERT_EQ(loaded->layers[3].w_gate_up.size(), weights_.layers[3].w_gate_up.size());
  for (size_t i = 0; i < weights_.layers[3].w_gate_up.size(); ++i) {
    const float want = weights_.layers[3].w_gate_up[i];
    ASSERT_NEAR(loaded->layers[3].w_gate_up[i], want, std::abs(want) / 256) << i;
  }
  EXPECT_EQ(loaded->final_norm, weights_.final_norm);  // 1.0 is exact in bf16
}

TEST_F(WeightsTest, ShapeMismatchNamesTensorAndShapes) {
  WriteConfig(ConfigJson(config_));
  std::vector<TensorToWrite> t = HfTensors(weights_);
  for (TensorToWrite& x : t) {
    if (x.name == "model.layers.1.self_attn.k_proj.weight") x.shape = {32, 2 * 256};
  }
  ASSERT_TRUE(WriteSafetensors((dir_ / "model.safetensors").string(), t).ok());
  auto loaded = LoadHfCheckpoint(dir_.string());
  ASSERT_FALSE(loaded.ok());
  EXPECT_THAT(loaded.status().message(),
              HasSubstr("tensor model.layers.1.self_attn.k_proj.weight has shape [32, 512] but "
                        "config.json implies [64, 256]"));
  EXPECT_THAT(loaded.status().message(), HasSubstr("model.safetensors"));
}

TEST_F(WeightsTest, NonFiniteWeightsAreRefusedByName) {
  for (const float bad :
       {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    WriteConfig(ConfigJson(config_));
    std::vector<TensorToWrite> t = HfTensors(weights_);
    for (TensorToWrite& x : t) {
      if (x.name == "model.layers.0.self_attn.q_proj.weight") x.values[5] = bad;
    }
    ASSERT_TRUE(WriteSafetensors((dir_ / "model.safetensors").string(), t).ok());
    auto loaded = LoadHfCheckpoint(dir_.string());
    ASSERT_FALSE(loaded.ok()) << bad;
    EXPECT_THAT(loaded.status().message(),
                HasSubstr("tensor model.layers.0.self_attn.q_proj.weight holds"));
    EXPECT_THAT(loaded.status().message(), HasSubstr("at element 5 (weights must be finite)"));
  }
}

TEST_F(WeightsTest, MissingTensorNamesTensorAndFile) {
  for (const char* missing : {"model.layers.2.mlp.up_proj.weight", "lm_head.weight"}) {
    WriteConfig(ConfigJson(config_));
    std::vector<TensorToWrite> t = HfTensors(weights_);
    std::erase_if(t, [&](const TensorToWrite& x) { return x.name == missing; });
    ASSERT_TRUE(WriteSafetensors((dir_ / "model.safetensors").string(), t).ok());
    auto loaded = LoadHfCheckpoint(dir_.string());
    ASSERT_FALSE(loaded.ok()) << missing;
    EXPECT_THAT(loaded.status().message(), HasSubstr(missing));
    EXPECT_THAT(loaded.status().message(), HasSubstr("model.safetensors"));
  }
}

TEST_F(WeightsTest, TiedCheckpointNeedsNoLmHead) {
  ModelConfig tied = config_;
  tied.tie_word_embeddings = true;
  ModelWeights w = weights_;
  w.config = tied;
  w.lm_head.clear();
  WriteConfig(ConfigJson(tied));
  ASSERT_TRUE(WriteSafetensors((dir_ / "model.safetensors").string(), HfTensors(w)).ok());
  auto loaded = LoadHfCheckpoint(dir_.string());
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_TRUE(loaded->lm_head.empty());
  ExpectSameWeights(*loaded, w);
}

// Issue 10 item 7: tensors Saturn does not use were ignored, so a checkpoint with biases
// loaded and computed without them. Each is now refused by name, single file or sharded.
TEST_F(WeightsTest, TensorsSaturnDoesNotUseAreRefusedByName) {
  for (const char* extra :
       {"model.layers.0.self_attn.q_proj.bias", "model.layers.3.mlp.down_proj.bias",
        "model.layers.1.self_attn.q_norm.weight", "score.weight"}) {
    WriteConfig(ConfigJson(config_));
    std::vector<TensorToWrite> t = HfTensors(weights_);
    t.push_back({extra, "F32", {4}, {0.5f, 0.5f, 0.5f, 0.5f}});
    ASSERT_TRUE(WriteSafetensors((dir_ / "model.safetensors").string(), t).ok());
    auto loaded = LoadHfCheckpoint(dir_.string());
    ASSERT_FALSE(loaded.ok()) << extra;
    EXPECT_EQ(loaded.status().code(), absl::StatusCode::kUnimplemented) << loaded.status();
    EXPECT_THAT(loaded.status().message(), HasSubstr(extra));
  }
  // Sharded: a shard holding a tensor the index does not even list is refused too.
  fs::remove(dir_ / "model.safetensors");
  std::vector<TensorToWrite> all = HfTensors(weights_);
  std::string map;
  for (const TensorToWrite& x : all)
    map += (map.empty() ? "\"" : ", \"") + x.name + "\": \"a.safetensors\"";
  all.push_back({"model.layers.2.self_attn.o_proj.bias", "F32", {2}, {1.0f, 2.0f}});
  ASSERT_TRUE(WriteSafetensors((dir_ / "a.safetensors").string(), all).ok());
  std::ofstream(dir_ / "model.safetensors.index.json") << "{\"weight_map\": {" << map << "}}";
  auto sharded = LoadHfCheckpoint(dir_.string());
  ASSERT_FALSE(sharded.ok());
  EXPECT_THAT(sharded.status().message(), HasSubstr("model.layers.2.self_attn.o_proj.bias"));
}

TEST_F(WeightsTest, TiedLmHeadMustBeTheEmbeddingsCopy) {
  ModelConfig tied = config_;
  tied.tie_word_embeddings = true;
  WriteConfig(ConfigJson(tied));
  std::vector<TensorToWrite> t = HfTensors(weights_);  // carries lm_head.weight
  for (TensorToWrite& x : t) {
    if (x.name == "lm_head.weight") x.values = weights_.embedding;
  }
  ASSERT_TRUE(WriteSafetensors((dir_ / "model.safetensors").string(), t).ok());
  auto same = LoadHfCheckpoint(dir_.string());
  ASSERT_TRUE(same.ok()) << same.status();
  EXPECT_TRUE(same->lm_head.empty());

  t = HfTensors(weights_);  // lm_head.weight differs from the embedding
  ASSERT_TRUE(WriteSafetensors((dir_ / "model.safetensors").string(), t).ok());
  auto differs = LoadHfCheckpoint(dir_.string());
  ASSERT_FALSE(differs.ok());
  EXPECT_THAT(differs.status().message(), HasSubstr("lm_head.weight differs"));
}

TEST_F(WeightsTest, RotaryInvFreqBuffersMustMatchTheConfig) {
  WriteConfig(ConfigJson(config_));  // rope_theta 10000
  const int half = config_.head_dim / 2;
  std::vector<float> inv(half);
  for (int i = 0; i < half; ++i)
    inv[i] = static_cast<float>(std::pow(10000.0, -2.0 * i / config_.head_dim));
  std::vector<TensorToWrite> t = HfTensors(weights_);
  for (int l = 0; l < config_.num_layers; ++l) {
    t.push_back({"model.layers." + std::to_string(l) + ".self_attn.rotary_emb.inv_freq",
                 "F32",
                 {half},
                 inv});
  }
  ASSERT_TRUE(WriteSafetensors((dir_ / "model.safetensors").string(), t).ok());
  auto ok = LoadHfCheckpoint(dir_.string());
  ASSERT_TRUE(ok.ok()) << ok.status();

  for (float& x : t.back().values) x *= 0.25f;  // linear x4 scaling baked into the buffer
  ASSERT_TRUE(WriteSafetensors((dir_ / "model.safetensors").string(), t).ok());
  auto scaled = LoadHfCheckpoint(dir_.string());
  ASSERT_FALSE(scaled.ok());
  EXPECT_THAT(scaled.status().message(), HasSubstr("rotary_emb.inv_freq"));
}

// Llama 3.x: rope_scaling llama3 and head_dim survive a save / load round trip.
TEST_F(WeightsTest, Llama3RopeScalingRoundTrips) {
  ModelWeights w = weights_;
  w.config.rope_llama3_factor = 8;
  w.config.rope_low_freq_factor = 1;
  w.config.rope_high_freq_factor = 4;
  w.config.rope_original_max_position = 512;
  ASSERT_TRUE(SaveHfCheckpoint(w, dir_.string(), "F16").ok());
  auto loaded = LoadHfCheckpoint(dir_.string());
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_FLOAT_EQ(loaded->config.rope_llama3_factor, 8);
  EXPECT_EQ(loaded->config.rope_original_max_position, 512);
  EXPECT_EQ(loaded->config.head_dim, config_.head_dim);
}

TEST_F(WeightsTest, BrokenCheckpointDirectories) {
  EXPECT_FALSE(LoadHfCheckpoint((dir_ / "nope").string()).ok());  // no config.json
  WriteConfig(R"({"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2"})");
  auto gpt2 = LoadHfCheckpoint(dir_.string());
  ASSERT_FALSE(gpt2.ok());
  EXPECT_THAT(gpt2.status().message(), HasSubstr("unsupported architecture GPT2LMHeadModel"));
  WriteConfig(ConfigJson(config_));
  auto no_weights = LoadHfCheckpoint(dir_.string());
  ASSERT_FALSE(no_weights.ok());
  EXPECT_THAT(no_weights.status().message(), HasSubstr("model.safetensors"));
  std::ofstream(dir_ / "model.safetensors.index.json") << "{\"weight_map\": 3}";
  EXPECT_FALSE(LoadHfCheckpoint(dir_.string()).ok());
  std::ofstream(dir_ / "model.safetensors.index.json")
      << R"({"weight_map": {"model.embed_tokens.weight": "missing-shard.safetensors"}})";
  auto bad_shard = LoadHfCheckpoint(dir_.string());
  ASSERT_FALSE(bad_shard.ok());
  EXPECT_THAT(bad_shard.status().message(), HasSubstr("missing-shard.safetensors"));
  // A shard is a file beside the index, never a path out of the directory.
  for (const char* path : {"../model.safetensors", "/etc/passwd", "sub/x.safetensors", ".."}) {
    std::ofstream(dir_ / "model.safetensors.index.json")
        << R"({"weight_map": {"model.embed_tokens.weight": ")" << path << R"("}})";
    auto outside = LoadHfCheckpoint(dir_.string());
    ASSERT_FALSE(outside.ok()) << path;
    EXPECT_THAT(outside.status().message(), HasSubstr("is not a file name in the checkpoint"))
        << path;
  }
}

TEST_F(WeightsTest, LoadModelPresetOrDirectory) {
  auto tiny = LoadModel("tiny", 42);
  ASSERT_TRUE(tiny.ok()) << tiny.status();
  auto direct = RandomWeights(*PresetConfig("tiny"), 42);
  ExpectSameWeights(*tiny, *direct);

  ASSERT_TRUE(SaveHfCheckpoint(weights_, dir_.string()).ok());
  auto from_dir = LoadModel(dir_.string(), 0);
  ASSERT_TRUE(from_dir.ok()) << from_dir.status();
  ExpectSameWeights(*from_dir, weights_);

  auto bad = LoadModel("no-such-model", 0);
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("tiny, small, 1b"));
}

}  // namespace
}  // namespace saturn
