// A small GGUF writer for tests (version 3, alignment 32): metadata (scalars, strings, arrays
// of strings or i32), tensors in f32, f16, q8_0 or q4_0 (quantized as llama.cpp's reference
// quantizers do: d = amax / 127, or the signed max / -8, values rounded), and a llama model
// written as llama.cpp's converter writes one (q and k rows permuted per head for its RoPE).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/model/gguf_dequant.h"
#include "engine/model/weights.h"
#include "kernels/half_float.h"

namespace saturn::testing_gguf {

class Writer {
 public:
  void U32(const std::string& key, uint32_t v) { Kv(key, 4, &v, 4); }
  void F32(const std::string& key, float v) { Kv(key, 6, &v, 4); }
  void Str(const std::string& key, const std::string& v) {
    Key(key);
    Put<uint32_t>(8);
    PutString(v);
    ++kvs_;
  }
  void Bool(const std::string& key, bool v) {
    const uint8_t b = v ? 1 : 0;
    Kv(key, 7, &b, 1);
  }
  // Arrays of strings and of i32 (as llama.cpp writes tokenizer.ggml.tokens and token_type).
  void StrArray(const std::string& key, const std::vector<std::string>& v) {
    ArrayHead(key, 8, v.size());
    for (const std::string& s : v) PutString(s);
  }
  void I32Array(const std::string& key, const std::vector<int32_t>& v) {
    ArrayHead(key, 5, v.size());
    for (int32_t x : v) Put<int32_t>(x);
  }
  // A tensor of `type` holding `data` already encoded; dims ne0 first.
  void Tensor(const std::string& name, std::vector<uint64_t> dims, uint32_t type,
              std::vector<uint8_t> data) {
    tensors_.push_back({name, std::move(dims), type, std::move(data)});
  }
  std::string Bytes() const {
    std::string out = "GGUF";
    auto put = [&out](const void* p, size_t n) { out.append(static_cast<const char*>(p), n); };
    const uint32_t version = 3;
    const uint64_t nt = tensors_.size();
    put(&version, 4);
    put(&nt, 8);
    put(&kvs_, 8);
    out += kv_;
    uint64_t offset = 0;
    for (const T& t : tensors_) {
      const uint64_t len = t.name.size();
      put(&len, 8);
      out += t.name;
      const uint32_t nd = static_cast<uint32_t>(t.dims.size());
      put(&nd, 4);
      for (uint64_t d : t.dims) put(&d, 8);
      put(&t.type, 4);
      put(&offset, 8);
      offset = (offset + t.data.size() + 31) / 32 * 32;
    }
    out.resize((out.size() + 31) / 32 * 32, '\0');
    for (const T& t : tensors_) {
      out.append(reinterpret_cast<const char*>(t.data.data()), t.data.size());
      out.resize((out.size() + 31) / 32 * 32, '\0');
    }
    return out;
  }
  void Save(const std::string& path) const {
    std::ofstream f(path, std::ios::binary);
    const std::string b = Bytes();
    f.write(b.data(), static_cast<std::streamsize>(b.size()));
  }

 private:
  struct T {
    std::string name;
    std::vector<uint64_t> dims;
    uint32_t type;
    std::vector<uint8_t> data;
  };
  template <typename V>
  void Put(V v) {
    kv_.append(reinterpret_cast<const char*>(&v), sizeof(v));
  }
  void PutString(const std::string& s) {
    Put<uint64_t>(s.size());
    kv_ += s;
  }
  void Key(const std::string& key) { PutString(key); }
  void ArrayHead(const std::string& key, uint32_t elem, uint64_t n) {
    Key(key);
    Put<uint32_t>(9);
    Put<uint32_t>(elem);
    Put<uint64_t>(n);
    ++kvs_;
  }
  void Kv(const std::string& key, uint32_t type, const void* v, size_t n) {
    Key(key);
    Put<uint32_t>(type);
    kv_.append(static_cast<const char*>(v), n);
    ++kvs_;
  }
  std::string kv_;
  uint64_t kvs_ = 0;
  std::vector<T> tensors_;
};

inline void PutHalf(std::vector<uint8_t>* out, float f) {
  const uint16_t h = F32ToF16(f);
  out->push_back(static_cast<uint8_t>(h & 0xFF));
  out->push_back(static_cast<uint8_t>(h >> 8));
}

// `x` encoded as `type` (f32, f16, q8_0 or q4_0; a multiple of 32 values for the last two).
inline std::vector<uint8_t> Encode(const std::vector<float>& x, uint32_t type) {
  std::vector<uint8_t> out;
  if (type == kGgmlF32) {
    out.resize(x.size() * 4);
    std::memcpy(out.data(), x.data(), out.size());
  } else if (type == kGgmlF16) {
    for (float v : x) PutHalf(&out, v);
  } else if (type == kGgmlQ8_0) {
    for (size_t b = 0; b < x.size(); b += 32) {
      float amax = 0;
      for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[b + j]));
      const float d = amax / 127, id = d != 0 ? 1 / d : 0;
      PutHalf(&out, d);
      for (int j = 0; j < 32; ++j) {
        out.push_back(static_cast<uint8_t>(static_cast<int8_t>(std::lround(x[b + j] * id))));
      }
    }
  } else if (type == kGgmlQ4_0) {
    for (size_t b = 0; b < x.size(); b += 32) {
      float amax = 0, max = 0;
      for (int j = 0; j < 32; ++j) {
        if (std::fabs(x[b + j]) > amax) amax = std::fabs(x[b + j]), max = x[b + j];
      }
      const float d = max / -8, id = d != 0 ? 1 / d : 0;
      PutHalf(&out, d);
      for (int j = 0; j < 16; ++j) {
        auto q = [&](float v) { return std::min(15, static_cast<int>(v * id + 8.5f)); };
        out.push_back(static_cast<uint8_t>(q(x[b + j]) | (q(x[b + 16 + j]) << 4)));
      }
    }
  }
  return out;
}

// llama.cpp's converter's q/k permutation: Hugging Face row j * hd/2 + i of each head goes to
// row 2i + j.
inline std::vector<float> PermuteHeads(const float* w, int heads, int hd, int64_t cols) {
  std::vector<float> out(static_cast<size_t>(heads) * hd * cols);
  for (int h = 0; h < heads; ++h) {
    for (int i = 0; i < hd / 2; ++i) {
      for (int j = 0; j < 2; ++j) {
        std::copy_n(w + (static_cast<int64_t>(h) * hd + j * hd / 2 + i) * cols, cols,
                    out.data() + (static_cast<int64_t>(h) * hd + 2 * i + j) * cols);
      }
    }
  }
  return out;
}

// `w` as a llama GGUF file whose matrices are `type` (norms stay f32, as llama.cpp keeps them).
// `type_of`, where given, picks each matrix's type by tensor name (a file of mixed types, as
// llama-quantize's _M presets write); else every matrix is `type`.
inline Writer LlamaFile(const ModelWeights& w, uint32_t type,
                        std::function<uint32_t(const std::string&)> type_of = nullptr) {
  const ModelConfig& m = w.config;
  Writer g;
  g.Str("general.architecture", "llama");
  g.U32("llama.context_length", m.max_position_embeddings);
  g.U32("llama.embedding_length", m.hidden_size);
  g.U32("llama.block_count", m.num_layers);
  g.U32("llama.feed_forward_length", m.intermediate_size);
  g.U32("llama.attention.head_count", m.num_heads);
  g.U32("llama.attention.head_count_kv", m.num_kv_heads);
  g.U32("llama.rope.dimension_count", m.head_dim);
  g.F32("llama.rope.freq_base", m.rope_theta);
  g.F32("llama.attention.layer_norm_rms_epsilon", m.rms_norm_eps);
  g.U32("tokenizer.ggml.bos_token_id", m.bos_token_id);
  g.U32("tokenizer.ggml.eos_token_id", m.eos_token_id);
  const uint64_t D = m.hidden_size, F = m.intermediate_size, V = m.vocab_size, hd = m.head_dim;
  const uint64_t q = m.num_heads * hd, kv = m.num_kv_heads * hd;
  auto mat = [&](const std::string& name, const float* p, uint64_t rows, uint64_t cols) {
    const uint32_t t = type_of ? type_of(name) : type;
    g.Tensor(name, {cols, rows}, t, Encode(std::vector<float>(p, p + rows * cols), t));
  };
  auto vec = [&](const std::string& name, const std::vector<float>& v) {
    g.Tensor(name, {v.size()}, kGgmlF32, Encode(v, kGgmlF32));
  };
  mat("token_embd.weight", w.embedding.data(), V, D);
  vec("output_norm.weight", w.final_norm);
  if (!m.tie_word_embeddings) mat("output.weight", w.lm_head.data(), V, D);
  for (int l = 0; l < m.num_layers; ++l) {
    const LayerWeights& L = w.layers[l];
    const std::string p = absl::StrCat("blk.", l, ".");
    vec(p + "attn_norm.weight", L.attn_norm);
    vec(p + "ffn_norm.weight", L.mlp_norm);
    const std::vector<float> wq = PermuteHeads(L.wqkv.data(), m.num_heads, hd, D);
    const std::vector<float> wk = PermuteHeads(L.wqkv.data() + q * D, m.num_kv_heads, hd, D);
    mat(p + "attn_q.weight", wq.data(), q, D);
    mat(p + "attn_k.weight", wk.data(), kv, D);
    mat(p + "attn_v.weight", L.wqkv.data() + (q + kv) * D, kv, D);
    mat(p + "attn_output.weight", L.wo.data(), D, q);
    mat(p + "ffn_gate.weight", L.w_gate_up.data(), F, D);
    mat(p + "ffn_up.weight", L.w_gate_up.data() + F * D, F, D);
    mat(p + "ffn_down.weight", L.w_down.data(), D, F);
  }
  return g;
}

}  // namespace saturn::testing_gguf
