// Model shape: the built-in presets and Hugging Face Llama config.json parsing. Owns no
// weights (engine/model/weights.h) and no device state.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/rope_params.h"

namespace saturn {

struct ModelConfig {
  std::string name;  // preset name or checkpoint directory
  int vocab_size = 0;
  int hidden_size = 0;        // d_model
  int intermediate_size = 0;  // SwiGLU inner width
  int num_layers = 0;
  int num_heads = 0;
  int num_kv_heads = 0;             // GQA: num_heads % num_kv_heads == 0
  int head_dim = 0;                 // hidden_size / num_heads unless config.json says otherwise
  int max_position_embeddings = 0;  // the model's context length
  float rms_norm_eps = 1e-5f;
  float rope_theta = 10000.0f;
  // Llama 3.x RoPE frequency scaling (config.json rope_scaling with rope_type "llama3");
  // rope_llama3_factor 0: plain RoPE.
  float rope_llama3_factor = 0.0f;
  float rope_low_freq_factor = 1.0f;
  float rope_high_freq_factor = 4.0f;
  int rope_original_max_position = 0;
  bool tie_word_embeddings = true;
  int bos_token_id = 1;
  int eos_token_id = 2;
  // A list eos_token_id's other ids (Llama 3.x Instruct: <|eom_id|>, <|eot_id|>): each ends a
  // request as EOS does.
  std::vector<int> extra_eos_token_ids;

  // What the RoPE kernels need (theta and the scaling above).
  RopeParams Rope() const;
  // Parameter count (embedding counted once when tied).
  int64_t NumParameters() const;
  // Checks internal consistency; the error names the field and the limit.
  absl::Status Validate() const;
};

// "tiny" (a few million parameters, for tests), "small" (~100M, the default) or "1b"
// (Llama-3.2-1B shape).
absl::StatusOr<ModelConfig> PresetConfig(const std::string& name);
// The preset names, comma-separated, for error messages and --help.
std::string PresetNames();

// Parses a Hugging Face config.json (LlamaForCausalLM / model_type "llama"). Every field is
// either implemented, known not to change the forward pass (bookkeeping, generation
// defaults, training-only settings; listed in model_config.cc), or refused: an unsupported
// architecture, hidden_act other than silu, attention_bias / mlp_bias true, rope_scaling other
// than llama3 (or default), sliding windows, partial rotary, quantization, custom code, and any
// field Saturn does not know are UNIMPLEMENTED errors naming the field, so that no checkpoint
// loads and then computes wrongly. Missing or malformed fields are INVALID_ARGUMENT naming
// the field. docs/CHECKPOINTS.md lists them all.
absl::StatusOr<ModelConfig> ParseHfConfig(const std::string& json_text, const std::string& name);

// Adds a checkpoint's generation_config.json eos_token_id (an integer or a list) to the ids
// that end a request, as transformers' generate() and vLLM (--generation-config auto) stop on
// them: Meta-Llama-3-8B-Instruct's config.json names only <|end_of_text|>, its
// generation_config.json also <|eot_id|>, the id a chat turn ends with. Its sampling defaults
// are not taken: Saturn's requests carry their own. Errors name the file and the field.
absl::Status MergeGenerationConfig(const std::string& json_text, ModelConfig* config);

}  // namespace saturn
