// Host-side model weights in f32, in the layout the runner uploads: q/k/v fused into one
// [(Hq + 2 Hkv) * hd, D] matrix and gate/up fused into one [2F, D] matrix (gate rows first),
// every matrix in the Hugging Face [out_features, in_features] layout. Either a seeded random
// init (scaled so activations stay finite over the full context) or a Hugging Face Llama
// checkpoint (config.json + model.safetensors, or sharded via model.safetensors.index.json;
// f32, bf16 and f16 tensors).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/model/model_config.h"

namespace saturn {

struct LayerWeights {
  std::vector<float> attn_norm;  // [D]
  std::vector<float> wqkv;       // [(Hq + 2 Hkv) * hd, D]: q rows, then k rows, then v rows
  std::vector<float> wo;         // [D, Hq * hd]
  std::vector<float> mlp_norm;   // [D]
  std::vector<float> w_gate_up;  // [2F, D]: gate rows, then up rows
  std::vector<float> w_down;     // [D, F]
};

struct ModelWeights {
  ModelConfig config;
  std::vector<float> embedding;  // [V, D]
  std::vector<LayerWeights> layers;
  std::vector<float> final_norm;  // [D]
  std::vector<float> lm_head;     // [V, D]; empty when config.tie_word_embeddings
};

absl::StatusOr<ModelWeights> RandomWeights(const ModelConfig& config, uint64_t seed);

// Loads <dir>/config.json and the safetensors file(s) beside it. Errors (missing tensor,
// shape disagreeing with config.json, truncated file, unknown dtype, unsupported
// architecture or config field: model_config.h) name the file and the tensor. Every tensor
// in the checkpoint must be one Saturn uses: any other (a bias, another architecture's
// weight) is an UNIMPLEMENTED error naming it; a tied checkpoint's lm_head.weight must equal
// the embedding, and rotary_emb.inv_freq buffers must equal config.json's RoPE frequencies.
absl::StatusOr<ModelWeights> LoadHfCheckpoint(const std::string& dir);

// Writes <dir>/config.json and <dir>/model.safetensors in Hugging Face Llama names and the
// unfused layout, tensors stored as `dtype` ("F32", "BF16" or "F16"); `dir` must exist. For
// tools and tests: LoadHfCheckpoint(dir) reads it back.
absl::Status SaveHfCheckpoint(const ModelWeights& weights, const std::string& dir,
                              const std::string& dtype = "F32");

// A llama-architecture GGUF file (llama.cpp's format; engine/model/gguf.h): its config from
// the metadata, tensors f32, f16, bf16, q8_0, q4_0, q4_K and q6_K dequantized to f32, q and k
// rows put back in Hugging Face order. Refused by name: another architecture, RoPE scaling,
// partial rotary, any tensor Saturn does not use, any other tensor type, a truncated or
// malformed file. The tokenizer in the file's metadata is engine/tokenizer/tokenizer_gguf.h's.
absl::StatusOr<ModelWeights> LoadGguf(const std::string& path);

// How the CPU backend serves a GGUF file's layer matrices under --quantization auto: `format`
// "q8_0" or "q4_0" (the backend's weight dtype) or "" (f32, as LoadGguf dequantizes them), and
// one line for the start-up log. Every matrix Q8_0 or every one Q4_0: that format, the blocks
// as they are. Every one block-quantized but in other types or a mix (Q4_K_M files: q4_K beside
// q6_K): q8_0, each dequantized weight rounded to it, since Saturn streams only those two. Any
// float matrix (F32, F16, BF16): "". The file's errors as GgufFile::Open's.
struct GgufServing {
  std::string format;
  std::string note;
};
absl::StatusOr<GgufServing> GgufWeightFormat(const std::string& path);

// "tiny" | "small" | "1b" (random weights from `seed`), a checkpoint directory or a .gguf
// file.
absl::StatusOr<ModelWeights> LoadModel(const std::string& model, uint64_t seed);

}  // namespace saturn
