// A llama-architecture GGUF file -> ModelConfig and f32 ModelWeights (weights.h: LoadGguf).
// Tensors of every type gguf_dequant.h reads are dequantized at load: the file serves as it
// is, at its own precision, but not yet at its own bytes per weight (kernels that stream the
// quantized blocks are issue 52's next step). llama.cpp's converter permutes each head's q and
// k rows for its RoPE (pairs interleaved, not halves): they are put back in Hugging Face order.
#include <algorithm>
#include <set>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/model/gguf.h"
#include "engine/model/gguf_dequant.h"
#include "engine/model/weights.h"
#include "kernels/base/status_macros.h"

namespace saturn {
namespace {

// Dequantizes tensor `name` (dims ne0 = cols, ne1 = rows) after checking its shape.
absl::StatusOr<std::vector<float>> Tensor2d(const GgufFile& f, const std::string& name,
                                            int64_t rows, int64_t cols,
                                            std::set<std::string>* used) {
  const GgufTensor* t = f.FindTensor(name);
  if (t == nullptr) return absl::InvalidArgumentError(absl::StrCat(f.name(), ": no tensor ", name));
  used->insert(name);
  const bool vector = rows == 1 && t->dims.size() == 1;
  if (!vector && (t->dims.size() != 2 || t->dims[0] != cols || t->dims[1] != rows)) {
    std::string dims;
    for (int64_t d : t->dims) absl::StrAppend(&dims, dims.empty() ? "" : " x ", d);
    return absl::InvalidArgumentError(absl::StrCat(f.name(), ": tensor ", name, " is ", dims,
                                                   " (ne0 first); the model config says ", cols,
                                                   " x ", rows));
  }
  if (vector && t->dims[0] != cols) {
    return absl::InvalidArgumentError(
        absl::StrCat(f.name(), ": tensor ", name, " has ", t->dims[0], " values; expected ", cols));
  }
  std::vector<float> out(static_cast<size_t>(rows * cols));
  if (absl::Status s = Dequantize(t->type, f.Data(*t), rows * cols, out.data()); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat(f.name(), ": tensor ", name, ": ", s.message()));
  }
  return out;
}

// llama.cpp's converter stores head h's rows as pairs (row 2i + j is Hugging Face row
// j * hd/2 + i); the inverse, in place on `w` ([heads * hd, cols]).
void UnpermuteHeads(std::vector<float>* w, int heads, int hd, int64_t cols) {
  std::vector<float> head(static_cast<size_t>(hd) * cols);
  for (int h = 0; h < heads; ++h) {
    float* base = w->data() + static_cast<size_t>(h) * hd * cols;
    for (int i = 0; i < hd / 2; ++i) {
      for (int j = 0; j < 2; ++j) {
        std::copy_n(base + (2 * i + j) * cols, cols, head.data() + (j * hd / 2 + i) * cols);
      }
    }
    std::copy(head.begin(), head.end(), base);
  }
}

absl::StatusOr<ModelConfig> ConfigOf(const GgufFile& f) {
  ASSIGN_OR_RETURN(const std::string arch, f.GetString("general.architecture"));
  if (arch != "llama") {
    return absl::UnimplementedError(absl::StrCat(f.name(), ": general.architecture \"", arch,
                                                 "\" is not one Saturn serves (llama)"));
  }
  ModelConfig m;
  m.name = f.name();
  auto u = [&](const std::string& key, int* out) -> absl::Status {
    ASSIGN_OR_RETURN(const uint64_t v, f.GetUint("llama." + key));
    if (v > (1u << 30))
      return absl::InvalidArgumentError(
          absl::StrCat(f.name(), ": llama.", key, " ", v, " is too large"));
    *out = static_cast<int>(v);
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(u("embedding_length", &m.hidden_size));
  RETURN_IF_ERROR(u("block_count", &m.num_layers));
  RETURN_IF_ERROR(u("feed_forward_length", &m.intermediate_size));
  RETURN_IF_ERROR(u("attention.head_count", &m.num_heads));
  RETURN_IF_ERROR(u("context_length", &m.max_position_embeddings));
  m.num_kv_heads = m.num_heads;
  if (f.Has("llama.attention.head_count_kv")) {
    RETURN_IF_ERROR(u("attention.head_count_kv", &m.num_kv_heads));
  }
  m.head_dim = m.num_heads > 0 ? m.hidden_size / m.num_heads : 0;
  if (f.Has("llama.attention.key_length")) {
    RETURN_IF_ERROR(u("attention.key_length", &m.head_dim));
  }
  if (f.Has("llama.rope.dimension_count")) {
    int rot = 0;
    RETURN_IF_ERROR(u("rope.dimension_count", &rot));
    if (rot != m.head_dim) {
      return absl::UnimplementedError(absl::StrCat(f.name(), ": llama.rope.dimension_count ", rot,
                                                   " rotates part of a head of ", m.head_dim,
                                                   "; Saturn rotates whole heads"));
    }
  }
  if (f.Has("llama.rope.scaling.type")) {
    ASSIGN_OR_RETURN(const std::string type, f.GetString("llama.rope.scaling.type"));
    if (type != "none") {
      return absl::UnimplementedError(
          absl::StrCat(f.name(), ": llama.rope.scaling.type \"", type, "\" is not implemented"));
    }
  }
  ASSIGN_OR_RETURN(const double eps, f.GetFloat("llama.attention.layer_norm_rms_epsilon"));
  m.rms_norm_eps = static_cast<float>(eps);
  if (f.Has("llama.rope.freq_base")) {
    ASSIGN_OR_RETURN(const double theta, f.GetFloat("llama.rope.freq_base"));
    m.rope_theta = static_cast<float>(theta);
  }
  const GgufTensor* embd = f.FindTensor("token_embd.weight");
  if (embd == nullptr || embd->dims.size() != 2) {
    return absl::InvalidArgumentError(
        absl::StrCat(f.name(), ": no 2-d tensor token_embd.weight (the vocabulary's size)"));
  }
  m.vocab_size = static_cast<int>(std::min<int64_t>(embd->dims[1], 1 << 30));
  m.tie_word_embeddings = f.FindTensor("output.weight") == nullptr;
  for (auto [key, out] : {std::pair{"tokenizer.ggml.bos_token_id", &m.bos_token_id},
                          std::pair{"tokenizer.ggml.eos_token_id", &m.eos_token_id}}) {
    if (!f.Has(key)) continue;
    ASSIGN_OR_RETURN(const uint64_t id, f.GetUint(key));
    if (id >= static_cast<uint64_t>(m.vocab_size)) {
      return absl::InvalidArgumentError(absl::StrCat(
          f.name(), ": ", key, " ", id, " is outside the vocabulary of ", m.vocab_size));
    }
    *out = static_cast<int>(id);
  }
  RETURN_IF_ERROR(m.Validate());
  return m;
}

}  // namespace

absl::StatusOr<GgufServing> GgufWeightFormat(const std::string& path) {
  ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> f, GgufFile::Open(path));
  std::set<uint32_t> types;
  for (const GgufTensor& t : f->tensors()) {
    // The layers' GEMM matrices: every 2-d tensor of a block but the norms'.
    if (absl::StartsWith(t.name, "blk.") && t.dims.size() == 2) types.insert(t.type);
  }
  std::vector<std::string> names;
  for (uint32_t t : types) {
    if (t == kGgmlF32 || t == kGgmlF16 || t == kGgmlBF16) return GgufServing{};
    names.push_back(GgmlTypeName(t));
  }
  if (types.empty()) return GgufServing{};
  const std::string held = absl::StrJoin(names, ", ");
  if (types.size() == 1 && (*types.begin() == kGgmlQ8_0 || *types.begin() == kGgmlQ4_0)) {
    const std::string format = *types.begin() == kGgmlQ8_0 ? "q8_0" : "q4_0";
    return GgufServing{format, absl::StrCat(path, " holds ", format,
                                            " weights; serving them as they are "
                                            "(--quantization none dequantizes them)")};
  }
  return GgufServing{
      "q8_0", absl::StrCat(path, " holds ", held,
                           " layer weights; Saturn streams q8_0 and q4_0 only, so they are served "
                           "as q8_0, each dequantized weight rounded to it (--quantization none "
                           "keeps them in f32)")};
}

absl::StatusOr<ModelWeights> LoadGguf(const std::string& path) {
  ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> f, GgufFile::Open(path));
  ModelWeights w;
  ASSIGN_OR_RETURN(w.config, ConfigOf(*f));
  const ModelConfig& m = w.config;
  const int64_t D = m.hidden_size, F = m.intermediate_size, V = m.vocab_size, hd = m.head_dim;
  const int64_t q_rows = int64_t{m.num_heads} * hd, kv_rows = int64_t{m.num_kv_heads} * hd;
  std::set<std::string> used;
  ASSIGN_OR_RETURN(w.embedding, Tensor2d(*f, "token_embd.weight", V, D, &used));
  ASSIGN_OR_RETURN(w.final_norm, Tensor2d(*f, "output_norm.weight", 1, D, &used));
  if (!m.tie_word_embeddings) {
    ASSIGN_OR_RETURN(w.lm_head, Tensor2d(*f, "output.weight", V, D, &used));
  }
  w.layers.resize(m.num_layers);
  for (int l = 0; l < m.num_layers; ++l) {
    LayerWeights& L = w.layers[l];
    const std::string p = absl::StrCat("blk.", l, ".");
    ASSIGN_OR_RETURN(L.attn_norm, Tensor2d(*f, p + "attn_norm.weight", 1, D, &used));
    ASSIGN_OR_RETURN(L.mlp_norm, Tensor2d(*f, p + "ffn_norm.weight", 1, D, &used));
    ASSIGN_OR_RETURN(std::vector<float> q, Tensor2d(*f, p + "attn_q.weight", q_rows, D, &used));
    ASSIGN_OR_RETURN(std::vector<float> k, Tensor2d(*f, p + "attn_k.weight", kv_rows, D, &used));
    ASSIGN_OR_RETURN(std::vector<float> v, Tensor2d(*f, p + "attn_v.weight", kv_rows, D, &used));
    UnpermuteHeads(&q, m.num_heads, static_cast<int>(hd), D);
    UnpermuteHeads(&k, m.num_kv_heads, static_cast<int>(hd), D);
    L.wqkv = std::move(q);
    L.wqkv.insert(L.wqkv.end(), k.begin(), k.end());
    L.wqkv.insert(L.wqkv.end(), v.begin(), v.end());
    ASSIGN_OR_RETURN(L.wo, Tensor2d(*f, p + "attn_output.weight", D, q_rows, &used));
    ASSIGN_OR_RETURN(std::vector<float> gate, Tensor2d(*f, p + "ffn_gate.weight", F, D, &used));
    ASSIGN_OR_RETURN(std::vector<float> up, Tensor2d(*f, p + "ffn_up.weight", F, D, &used));
    L.w_gate_up = std::move(gate);
    L.w_gate_up.insert(L.w_gate_up.end(), up.begin(), up.end());
    ASSIGN_OR_RETURN(L.w_down, Tensor2d(*f, p + "ffn_down.weight", D, F, &used));
  }
  // Every tensor must be one Saturn uses: anything else (a bias, rope_freqs for RoPE scaling,
  // another architecture's weight) would be silently ignored and compute wrongly.
  for (const GgufTensor& t : f->tensors()) {
    if (used.count(t.name) == 0) {
      return absl::UnimplementedError(
          absl::StrCat(path, ": tensor ", t.name, " is not one a llama model Saturn serves uses"));
    }
  }
  return w;
}

}  // namespace saturn
