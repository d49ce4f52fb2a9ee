// GGUF files: a model written as llama.cpp's converter writes one loads back to the same
// weights (f32 exactly, f16 / q8_0 / q4_0 within their rounding), the q4_K and q6_K block
// layouts dequantize as ggml's do, an engine serving the file gives the preset's tokens, and
// malformed files (every truncation, wrong magic or version, unknown types, unused tensors,
// another architecture, misaligned data) are refused by name without reading out of bounds.
#include "engine/model/gguf.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "engine/engine.h"
#include "engine/model/gguf_dequant.h"
#include "engine/model/weights.h"
#include "tests/engine/engine_test_util.h"
#include "tests/engine/model/gguf_writer.h"
#include "tests/engine/tokenizer/hf_python.h"

namespace saturn {
namespace {

namespace fs = std::filesystem;
using testing_gguf::LlamaFile;
using testing_gguf::Writer;

std::string TempPath(const std::string& name) {
  return (fs::temp_directory_path() / absl::StrCat("saturn-gguf-", ::getpid(), "-", name, ".gguf"))
      .string();
}

// A model small enough to truncate at every few bytes: 1 layer, GQA, untied head.
ModelWeights Mini() {
  ModelConfig c;
  c.name = "mini";
  c.vocab_size = 64;
  c.hidden_size = 32;
  c.intermediate_size = 64;
  c.num_layers = 1;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 8;
  c.max_position_embeddings = 128;
  c.tie_word_embeddings = false;
  absl::StatusOr<ModelWeights> w = RandomWeights(c, 7);
  EXPECT_TRUE(w.ok()) << w.status();
  return *w;
}

// Every matrix of `b` within `tol(a)` of `a`'s.
template <typename Tol>
void ExpectNear(const ModelWeights& a, const ModelWeights& b, Tol tol) {
  auto near = [&](const std::vector<float>& x, const std::vector<float>& y, const char* what) {
    ASSERT_EQ(x.size(), y.size()) << what;
    for (size_t i = 0; i < x.size(); ++i) {
      ASSERT_LE(std::fabs(x[i] - y[i]), tol(x)) << what << "[" << i << "]";
    }
  };
  near(a.embedding, b.embedding, "embedding");
  near(a.final_norm, b.final_norm, "final_norm");
  near(a.lm_head, b.lm_head, "lm_head");
  for (size_t l = 0; l < a.layers.size(); ++l) {
    near(a.layers[l].wqkv, b.layers[l].wqkv, "wqkv");
    near(a.layers[l].wo, b.layers[l].wo, "wo");
    near(a.layers[l].w_gate_up, b.layers[l].w_gate_up, "w_gate_up");
    near(a.layers[l].w_down, b.layers[l].w_down, "w_down");
    near(a.layers[l].attn_norm, b.layers[l].attn_norm, "attn_norm");
  }
}

float MaxAbs(const std::vector<float>& x) {
  float m = 0;
  for (float v : x) m = std::max(m, std::fabs(v));
  return m;
}

TEST(GgufTest, F32FileLoadsTheSameWeightsAndConfig) {
  const ModelWeights w = Mini();
  const std::string path = TempPath("f32");
  LlamaFile(w, kGgmlF32).Save(path);
  absl::StatusOr<ModelWeights> got = LoadModel(path, 0);
  ASSERT_TRUE(got.ok()) << got.status();
  const ModelConfig& m = got->config;
  EXPECT_EQ(m.vocab_size, 64);
  EXPECT_EQ(m.hidden_size, 32);
  EXPECT_EQ(m.num_kv_heads, 2);
  EXPECT_EQ(m.head_dim, 8);
  EXPECT_FALSE(m.tie_word_embeddings);
  EXPECT_EQ(m.rms_norm_eps, w.config.rms_norm_eps);
  ExpectNear(w, *got, [](const std::vector<float>&) { return 0.0f; });  // bit for bit
  fs::remove(path);
}

TEST(GgufTest, QuantizedFilesLoadWithinTheirRounding) {
  const ModelWeights w = Mini();
  // f16: half an ulp; q8_0: half a step of amax / 127 (over the whole tensor's largest, a
  // bound for every block's), plus the f16 rounding of the step times 127 steps; q4_0: a step
  // of amax / 8.
  const std::pair<uint32_t, float> kinds[] = {
      {kGgmlF16, 1.0f / 2048}, {kGgmlQ8_0, 0.5f / 127}, {kGgmlQ4_0, 1.0f / 8}};
  for (const auto& [type, rel] : kinds) {
    const std::string path = TempPath(GgmlTypeName(type));
    LlamaFile(w, type).Save(path);
    absl::StatusOr<ModelWeights> got = LoadGguf(path);
    ASSERT_TRUE(got.ok()) << got.status();
    ExpectNear(w, *got, [rel = rel](const std::vector<float>& x) {
      return MaxAbs(x) * rel * 1.15f + 1e-7f;
    });
    fs::remove(path);
  }
}

// Hand-built blocks against values worked out from ggml's definitions.
TEST(GgufTest, KQuantBlocksDequantizeAsGgmlDefinesThem) {
  std::vector<uint8_t> q4k(144, 0);
  q4k[0] = 0x00, q4k[1] = 0x40;  // d = 2 (f16)
  q4k[2] = 0x00, q4k[3] = 0x3C;  // dmin = 1
  uint8_t* sc = &q4k[4];
  sc[0] = 3 | (1 << 6);  // sub-block 0 scale 3 (and a high bit for sub-block 4's scale)
  sc[4] = 5;             // sub-block 0 min 5
  sc[1] = 1, sc[5] = 2;  // sub-block 1: scale 1, min 2
  sc[8] = 0x21;          // sub-block 4: scale 1 | 1 << 4 = 17, min 2
  uint8_t* qs = &q4k[16];
  qs[0] = 0x97;   // value 0 (sub-block 0, low nibble 7) and value 32 (sub-block 1, high 9)
  qs[64] = 0x0A;  // value 128 (sub-block 4, low nibble 10)
  std::vector<float> y(256);
  ASSERT_TRUE(Dequantize(kGgmlQ4_K, q4k, 256, y.data()).ok());
  EXPECT_EQ(y[0], 2 * 3 * 7 - 1 * 5);
  EXPECT_EQ(y[32], 2 * 1 * 9 - 1 * 2);
  EXPECT_EQ(y[128], 2 * 17 * 10 - 1 * 2);
  EXPECT_EQ(y[1], -5);  // nibble 0: -dmin * min

  std::vector<uint8_t> q6k(210, 0);
  uint8_t* ql = &q6k[0];
  uint8_t* qh = &q6k[128];
  int8_t* s6 = reinterpret_cast<int8_t*>(&q6k[192]);
  q6k[208] = 0x00, q6k[209] = 0x38;  // d = 0.5
  s6[0] = 2, s6[2] = -1, s6[4] = 1;
  ql[0] = 0x35;        // value 0: low 5; value 64: low 3
  ql[32] = 0x0C;       // value 32: low 12
  qh[0] = 0b00000110;  // value 0: high 2; value 32: high 1; value 64: high 0
  ASSERT_TRUE(Dequantize(kGgmlQ6_K, q6k, 256, y.data()).ok());
  EXPECT_EQ(y[0], 0.5f * 2 * ((5 | 2 << 4) - 32));
  EXPECT_EQ(y[32], 0.5f * -1 * ((12 | 1 << 4) - 32));
  EXPECT_EQ(y[64], 0.5f * 1 * (3 - 32));
  EXPECT_FALSE(Dequantize(kGgmlQ6_K, q6k, 512, y.data()).ok());  // more values than bytes
}

// Random blocks of each quantized type, dequantized by llama.cpp's own `gguf` package (PyPI;
// tests/run_all.sh installs it beside the build) and by Saturn: the same values. Skips, saying
// why, where the package is missing.
TEST(GgufTest, QuantizedBlocksMatchLlamaCppsGgufPackage) {
  const std::string prefix = TempPath("reference");
  const int code = hf_test::RunScript("engine/model/gguf_reference.py", prefix, prefix + ".err");
  if (code == 3 || code == 127) {
    GTEST_SKIP() << "llama.cpp's `gguf` package (PyPI) is not available to " << hf_test::Python()
                 << ", so there is nothing to compare with; tests/run_all.sh installs it where "
                    "pip can reach PyPI";
  }
  ASSERT_EQ(code, 0) << hf_test::ReadFile(prefix + ".err");
  absl::StatusOr<std::unique_ptr<GgufFile>> f = GgufFile::Open(prefix + ".gguf");
  ASSERT_TRUE(f.ok()) << f.status();
  const std::string ref_bytes = hf_test::ReadFile(prefix + ".f32");
  std::vector<float> ref(ref_bytes.size() / 4);
  std::memcpy(ref.data(), ref_bytes.data(), ref.size() * 4);
  size_t at = 0;
  for (const char* name : {"q8_0", "q4_0", "q4_K", "q6_K"}) {
    const GgufTensor* t = (*f)->FindTensor(name);
    ASSERT_NE(t, nullptr) << name;
    std::vector<float> got(static_cast<size_t>(t->elements()));
    ASSERT_TRUE(Dequantize(t->type, (*f)->Data(*t), t->elements(), got.data()).ok()) << name;
    ASSERT_LE(at + got.size(), ref.size());
    for (size_t i = 0; i < got.size(); ++i, ++at) {
      ASSERT_NEAR(got[i], ref[at], 1e-6f * std::max(1.0f, std::fabs(ref[at])))
          << name << " value " << i;
    }
  }
  EXPECT_EQ(at, ref.size());
  for (const char* ext : {".gguf", ".f32", ".err"}) fs::remove(prefix + ext);
}

// 12 greedy tokens of a 5-token prompt on an engine of config `c`, and its weights' dtype.
std::pair<std::vector<int>, DType> GreedyTokens(const EngineConfig& c) {
  auto e = Engine::Create(c);
  EXPECT_TRUE(e.ok()) << e.status();
  if (!e.ok()) return {};
  GenerateRequest r;
  r.prompt = {1, 17, 30, 42, 9};
  r.sampling.max_tokens = 12;
  r.sampling.ignore_eos = true;
  auto s = RequestStream::Open(e->get(), r);
  EXPECT_TRUE(s.ok()) << s.status();
  if (!s.ok()) return {};
  std::vector<int> tokens;
  TokenEvent ev;
  while ((*s)->Next(&ev)) tokens.insert(tokens.end(), ev.token_ids.begin(), ev.token_ids.end());
  return {tokens, (*e)->info().weight_dtype};
}

TEST(GgufTest, AnEngineServingTheFileGivesThePresetsTokens) {
  absl::StatusOr<ModelWeights> tiny = LoadModel("tiny", EngineConfig().weight_seed);
  ASSERT_TRUE(tiny.ok()) << tiny.status();
  const std::string path = TempPath("tiny");
  LlamaFile(*tiny, kGgmlF32).Save(path);
  std::vector<std::vector<int>> out;
  for (const std::string model : {std::string("tiny"), path}) {
    EngineConfig c = testing_engine::TinyConfig();
    c.model = model;
    out.push_back(GreedyTokens(c).first);
  }
  EXPECT_EQ(out[0].size(), 12u);
  EXPECT_EQ(out[0], out[1]);
  fs::remove(path);
}

// Greedy tokens of `model` served with `quantization` (dtype auto; Mini's context).
std::pair<std::vector<int>, DType> Serve(const std::string& model,
                                         const std::string& quantization) {
  EngineConfig c = testing_engine::TinyConfig();
  c.model = model;
  c.dtype = "auto";
  c.quantization = quantization;
  c.max_model_len = 64;
  return GreedyTokens(c);
}

// A q8_0 or q4_0 file is served as it is (--quantization auto: its blocks streamed by the
// quantized GEMM), and its tokens are those of the same weights in an f32 file quantized at
// load (--quantization): dequantized blocks quantize to the same bytes. The q4_0 side starts
// from the file's own (dequantized) weights, since its LM head takes q8_0 either way.
TEST(GgufTest, AQuantizedFileServesAsItsWeightsQuantizedAtLoad) {
  const ModelWeights mini = Mini();
  for (const auto& [type, format] :
       {std::pair{kGgmlQ8_0, DType::kQ8_0}, {kGgmlQ4_0, DType::kQ4_0}}) {
    SCOPED_TRACE(DTypeName(format));
    const std::string qpath = TempPath(std::string("q-") + DTypeName(format));
    const std::string fpath = TempPath(std::string("f-") + DTypeName(format));
    LlamaFile(mini, type).Save(qpath);
    absl::StatusOr<ModelWeights> held = LoadModel(qpath, 0);  // what the blocks stand for
    ASSERT_TRUE(held.ok()) << held.status();
    LlamaFile(type == kGgmlQ8_0 ? mini : *held, kGgmlF32).Save(fpath);
    absl::StatusOr<GgufServing> found = GgufWeightFormat(qpath);
    ASSERT_TRUE(found.ok()) << found.status();
    EXPECT_EQ(found->format, DTypeName(format));
    EXPECT_TRUE(absl::StrContains(found->note, "as they are")) << found->note;
    EXPECT_EQ(GgufWeightFormat(fpath)->format, "");

    const auto [as_is, as_is_dtype] = Serve(qpath, "auto");
    EXPECT_EQ(as_is_dtype, format);
    const auto [at_load, at_load_dtype] = Serve(fpath, DTypeName(format));
    EXPECT_EQ(at_load_dtype, format);
    EXPECT_EQ(as_is.size(), 12u);
    EXPECT_EQ(as_is, at_load);
    // --quantization none serves the dequantized weights in a float dtype.
    const auto [none, none_dtype] = Serve(qpath, "none");
    EXPECT_FALSE(IsBlockQuantized(none_dtype)) << DTypeName(none_dtype);
    EXPECT_EQ(none.size(), 12u);
    fs::remove(qpath);
    fs::remove(fpath);
  }
}

// A file of mixed block types (attention q4_0, MLP q8_0; Q4_K_M files mix q4_K and q6_K) is
// served as q8_0, each dequantized weight rounded to it: the tokens of its dequantized weights
// quantized to q8_0 at load. One float matrix among them keeps the whole file in f32.
TEST(GgufTest, AMixedQuantizedFileServesAsQ8_0) {
  const ModelWeights mini = Mini();
  auto attention_q4 = [](const std::string& name) {
    return absl::StrContains(name, "attn_") ? kGgmlQ4_0 : kGgmlQ8_0;
  };
  const std::string mixed = TempPath("mixed");
  LlamaFile(mini, kGgmlQ8_0, attention_q4).Save(mixed);
  absl::StatusOr<GgufServing> found = GgufWeightFormat(mixed);
  ASSERT_TRUE(found.ok()) << found.status();
  EXPECT_EQ(found->format, "q8_0");
  EXPECT_TRUE(absl::StrContains(found->note, "q4_0, q8_0")) << found->note;
  absl::StatusOr<ModelWeights> held = LoadModel(mixed, 0);
  ASSERT_TRUE(held.ok()) << held.status();
  const std::string f32 = TempPath("mixed-f32");
  LlamaFile(*held, kGgmlF32).Save(f32);
  const auto [as_file, file_dtype] = Serve(mixed, "auto");
  const auto [at_load, load_dtype] = Serve(f32, "q8_0");
  EXPECT_EQ(file_dtype, DType::kQ8_0);
  EXPECT_EQ(as_file.size(), 12u);
  EXPECT_EQ(as_file, at_load);
  const std::string with_float = TempPath("mixed-float");
  LlamaFile(mini, kGgmlQ8_0, [](const std::string& name) {
    return absl::StrContains(name, "ffn_down") ? kGgmlF16 : kGgmlQ8_0;
  }).Save(with_float);
  EXPECT_EQ(GgufWeightFormat(with_float)->format, "");
  for (const std::string& p : {mixed, f32, with_float}) fs::remove(p);
}

// --quantization with an explicit float --dtype is a contradiction, refused by name; a
// quantization Saturn does not have is refused listing those it has.
TEST(GgufTest, QuantizationFlagErrorsNameTheField) {
  EngineConfig c = testing_engine::TinyConfig();
  c.quantization = "q8_0";
  c.dtype = "bf16";
  absl::Status s = Engine::Create(c).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "quantization")) << s;
  c.dtype = "auto";
  c.quantization = "q5_k";
  s = Engine::Create(c).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "q4_0")) << s;
}

absl::Status ParseBytes(const std::string& b) {
  return GgufFile::Parse(absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(b.data()), b.size()),
                         "test.gguf")
      .status();
}

TEST(GgufTest, EveryTruncationIsRefusedNeverReadPast) {
  const std::string full = LlamaFile(Mini(), kGgmlQ8_0).Bytes();
  ASSERT_TRUE(ParseBytes(full).ok());
  int refused = 0;
  for (size_t n = 0; n < full.size(); n += n < 4096 ? 1 : 61) {
    const absl::Status s = ParseBytes(full.substr(0, n));  // a copy: ASan sees its end
    EXPECT_FALSE(s.ok()) << "truncated at " << n;
    refused += s.ok() ? 0 : 1;
  }
  EXPECT_GT(refused, 4000);
}

TEST(GgufTest, MalformedFilesAreRefusedByName) {
  const ModelWeights w = Mini();
  std::string b = LlamaFile(w, kGgmlF32).Bytes();
  std::string bad = b;
  bad[0] = 'X';
  EXPECT_NE(ParseBytes(bad).message().find("magic"), std::string::npos);
  bad = b;
  bad[4] = 1;  // version 1
  EXPECT_NE(ParseBytes(bad).message().find("version: 1 is not 2 or 3"), std::string::npos);

  Writer q5k = LlamaFile(w, kGgmlF32);
  q5k.Tensor("blk.0.extra.weight", {256}, 13, std::vector<uint8_t>(176));  // q5_K
  const absl::Status s = ParseBytes(q5k.Bytes());
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(s.message().find("tensor blk.0.extra.weight is q5_K"), std::string::npos) << s;

  Writer extra = LlamaFile(w, kGgmlF32);
  extra.Tensor("blk.0.attn_q.bias", {32}, kGgmlF32, std::vector<uint8_t>(128));
  const std::string path = TempPath("extra");
  extra.Save(path);
  absl::StatusOr<ModelWeights> got = LoadGguf(path);
  EXPECT_EQ(got.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(got.status().message().find("tensor blk.0.attn_q.bias"), std::string::npos)
      << got.status();

  Writer other;
  other.Str("general.architecture", "qwen2");
  other.Save(path);
  got = LoadGguf(path);
  EXPECT_NE(got.status().message().find("general.architecture \"qwen2\""), std::string::npos)
      << got.status();

  Writer missing = LlamaFile(w, kGgmlF32);
  missing.Str("llama.rope.scaling.type", "yarn");
  missing.Save(path);
  got = LoadGguf(path);
  EXPECT_NE(got.status().message().find("llama.rope.scaling.type \"yarn\""), std::string::npos)
      << got.status();
  fs::remove(path);
}

}  // namespace
}  // namespace saturn
