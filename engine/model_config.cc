// Built-in model presets, parameter counting, validation and Hugging Face config.json parsing.
// Owns no weights; never throws (nlohmann/json exceptions are caught here and become Status).
#include "engine/model_config.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "kernels/status_macros.h"

namespace saturn {
namespace {

constexpr const char* kPresetNames[] = {"tiny", "small", "1b"};

ModelConfig MakePreset(const std::string& name, int vocab, int hidden, int inter, int layers,
                       int heads, int kv_heads, int head_dim, int max_pos, float rope_theta) {
  ModelConfig c;
  c.name = name;
  c.vocab_size = vocab;
  c.hidden_size = hidden;
  c.intermediate_size = inter;
  c.num_layers = layers;
  c.num_heads = heads;
  c.num_kv_heads = kv_heads;
  c.head_dim = head_dim;
  c.max_position_embeddings = max_pos;
  c.rope_theta = rope_theta;
  c.rms_norm_eps = 1e-5f;
  c.tie_word_embeddings = true;
  c.bos_token_id = 1;  // the byte tokenizer's (engine/tokenizer.h)
  c.eos_token_id = 2;
  return c;
}

absl::Status Positive(const char* field, int64_t value) {
  if (value > 0) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(field, " must be positive, got ", value));
}

// Reads a required integer field; the error names it.
absl::StatusOr<int> RequiredInt(const nlohmann::json& j, const char* field) {
  auto it = j.find(field);
  if (it == j.end() || it->is_null()) {
    return absl::InvalidArgumentError(absl::StrCat("config.json: missing field ", field));
  }
  if (!it->is_number_integer()) {
    return absl::InvalidArgumentError(
        absl::StrCat("config.json: field ", field, " must be an integer, got ", it->dump()));
  }
  int64_t v = it->get<int64_t>();
  if (v < INT32_MIN || v > INT32_MAX) {
    return absl::InvalidArgumentError(
        absl::StrCat("config.json: field ", field, " out of range: ", v));
  }
  return static_cast<int>(v);
}

absl::StatusOr<int> OptionalInt(const nlohmann::json& j, const char* field, int fallback) {
  auto it = j.find(field);
  if (it == j.end() || it->is_null()) return fallback;
  return RequiredInt(j, field);
}

absl::StatusOr<float> OptionalFloat(const nlohmann::json& j, const char* field, float fallback) {
  auto it = j.find(field);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_number()) {
    return absl::InvalidArgumentError(
        absl::StrCat("config.json: field ", field, " must be a number, got ", it->dump()));
  }
  return it->get<float>();
}

// bos/eos may be an integer, a list of integers (Llama 3.x eos: take the first) or null.
absl::StatusOr<int> TokenId(const nlohmann::json& j, const char* field, int fallback) {
  auto it = j.find(field);
  if (it == j.end() || it->is_null()) return fallback;
  const nlohmann::json* v = &*it;
  if (v->is_array()) {
    if (v->empty()) return fallback;
    v = &(*v)[0];
  }
  if (!v->is_number_integer()) {
    return absl::InvalidArgumentError(
        absl::StrCat("config.json: field ", field, " must be an integer or a list of integers"));
  }
  return v->get<int>();
}

absl::StatusOr<ModelConfig> ParseHfConfigJson(const nlohmann::json& j, const std::string& name) {
  if (!j.is_object()) return absl::InvalidArgumentError("config.json: top level is not an object");
  bool llama = false;
  std::string arch = "<none>";
  if (auto it = j.find("model_type"); it != j.end() && it->is_string()) {
    arch = it->get<std::string>();
    llama = arch == "llama";
  }
  if (auto it = j.find("architectures"); it != j.end() && it->is_array()) {
    for (const auto& a : *it) {
      if (!a.is_string()) continue;
      if (a.get<std::string>() == "LlamaForCausalLM") llama = true;
      if (!llama) arch = a.get<std::string>();
    }
  }
  if (!llama) {
    return absl::UnimplementedError(absl::StrCat("config.json: unsupported architecture ", arch,
                                                 " (Saturn runs Llama-style decoders)"));
  }
  ModelConfig c;
  c.name = name;
  ASSIGN_OR_RETURN(c.vocab_size, RequiredInt(j, "vocab_size"));
  ASSIGN_OR_RETURN(c.hidden_size, RequiredInt(j, "hidden_size"));
  ASSIGN_OR_RETURN(c.intermediate_size, RequiredInt(j, "intermediate_size"));
  ASSIGN_OR_RETURN(c.num_layers, RequiredInt(j, "num_hidden_layers"));
  ASSIGN_OR_RETURN(c.num_heads, RequiredInt(j, "num_attention_heads"));
  ASSIGN_OR_RETURN(c.num_kv_heads, OptionalInt(j, "num_key_value_heads", c.num_heads));
  int default_head_dim = c.num_heads > 0 ? c.hidden_size / c.num_heads : 0;
  ASSIGN_OR_RETURN(c.head_dim, OptionalInt(j, "head_dim", default_head_dim));
  ASSIGN_OR_RETURN(c.max_position_embeddings, RequiredInt(j, "max_position_embeddings"));
  ASSIGN_OR_RETURN(c.rms_norm_eps, OptionalFloat(j, "rms_norm_eps", 1e-6f));
  ASSIGN_OR_RETURN(c.rope_theta, OptionalFloat(j, "rope_theta", 10000.0f));
  // rope_scaling (Llama 3.x "llama3" frequency scaling) is deliberately ignored: Saturn applies
  // plain RoPE, which matches HF only within the original pre-training context
  // (original_max_position_embeddings); positions beyond it differ from HF.
  c.tie_word_embeddings = false;  // the HF PretrainedConfig default for Llama is false
  if (auto it = j.find("tie_word_embeddings"); it != j.end() && !it->is_null()) {
    if (!it->is_boolean()) {
      return absl::InvalidArgumentError("config.json: field tie_word_embeddings must be a bool");
    }
    c.tie_word_embeddings = it->get<bool>();
  }
  ASSIGN_OR_RETURN(c.bos_token_id, TokenId(j, "bos_token_id", c.bos_token_id));
  ASSIGN_OR_RETURN(c.eos_token_id, TokenId(j, "eos_token_id", c.eos_token_id));
  RETURN_IF_ERROR(c.Validate());
  return c;
}

}  // namespace

int64_t ModelConfig::NumParameters() const {
  const int64_t d = hidden_size, f = intermediate_size, hd = head_dim;
  const int64_t q = int64_t{num_heads} * hd, kv = int64_t{num_kv_heads} * hd;
  int64_t n = int64_t{vocab_size} * d;                     // embedding
  if (!tie_word_embeddings) n += int64_t{vocab_size} * d;  // lm_head
  const int64_t per_layer = (q + 2 * kv) * d               // wqkv
                            + d * q                        // wo
                            + 2 * f * d                    // gate, up
                            + d * f                        // down
                            + 2 * d;                       // attn_norm, mlp_norm
  n += per_layer * num_layers;
  n += d;  // final norm
  return n;
}

absl::Status ModelConfig::Validate() const {
  RETURN_IF_ERROR(Positive("vocab_size", vocab_size));
  RETURN_IF_ERROR(Positive("hidden_size", hidden_size));
  RETURN_IF_ERROR(Positive("intermediate_size", intermediate_size));
  RETURN_IF_ERROR(Positive("num_layers", num_layers));
  RETURN_IF_ERROR(Positive("num_heads", num_heads));
  RETURN_IF_ERROR(Positive("num_kv_heads", num_kv_heads));
  RETURN_IF_ERROR(Positive("head_dim", head_dim));
  RETURN_IF_ERROR(Positive("max_position_embeddings", max_position_embeddings));
  if (num_kv_heads > num_heads || num_heads % num_kv_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "num_heads (", num_heads, ") must be a multiple of num_kv_heads (", num_kv_heads, ")"));
  }
  if (head_dim % 2 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("head_dim must be even for RoPE, got ", head_dim));
  }
  if (!(rms_norm_eps > 0.0f) || !std::isfinite(rms_norm_eps)) {
    return absl::InvalidArgumentError(
        absl::StrCat("rms_norm_eps must be positive and finite, got ", rms_norm_eps));
  }
  if (!(rope_theta > 0.0f) || !std::isfinite(rope_theta)) {
    return absl::InvalidArgumentError(
        absl::StrCat("rope_theta must be positive and finite, got ", rope_theta));
  }
  if (bos_token_id < 0 || bos_token_id >= vocab_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("bos_token_id ", bos_token_id, " outside [0, vocab_size=", vocab_size, ")"));
  }
  if (eos_token_id < 0 || eos_token_id >= vocab_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("eos_token_id ", eos_token_id, " outside [0, vocab_size=", vocab_size, ")"));
  }
  return absl::OkStatus();
}

absl::StatusOr<ModelConfig> PresetConfig(const std::string& name) {
  if (name == "tiny") return MakePreset(name, 4096, 256, 688, 4, 8, 2, 32, 1024, 10000.0f);
  if (name == "small") return MakePreset(name, 32000, 768, 2048, 12, 12, 4, 64, 2048, 10000.0f);
  if (name == "1b") return MakePreset(name, 128256, 2048, 8192, 16, 32, 8, 64, 131072, 500000.0f);
  return absl::InvalidArgumentError(
      absl::StrCat("unknown model preset \"", name, "\" (valid: ", PresetNames(), ")"));
}

std::string PresetNames() { return absl::StrJoin(kPresetNames, ", "); }

absl::StatusOr<ModelConfig> ParseHfConfig(const std::string& json_text, const std::string& name) {
  try {
    nlohmann::json j = nlohmann::json::parse(json_text);
    return ParseHfConfigJson(j, name);
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("config.json: ", e.what()));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("config.json: ", e.what()));
  }
}

}  // namespace saturn
