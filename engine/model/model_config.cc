// Built-in model presets, parameter counting, validation and Hugging Face config.json parsing.
// Owns no weights; never throws (nlohmann/json exceptions are caught here and become Status).
#include "engine/model/model_config.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "kernels/base/json_depth.h"
#include "kernels/base/status_macros.h"

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
  c.bos_token_id = 1;  // the byte tokenizer's (engine/tokenizer/byte_tokenizer.h)
  c.eos_token_id = 2;
  return c;
}

// A value as a refusal shows it: its JSON, cut after 120 characters.
std::string Shown(const nlohmann::json& v) {
  std::string text = v.dump();
  if (text.size() > 120) text = text.substr(0, 120) + "...";
  return text;
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
        absl::StrCat("config.json: field ", field, " must be an integer, got ", Shown(*it)));
  }
  if (it->is_number_unsigned() && it->get<uint64_t>() > uint64_t{INT32_MAX}) {
    return absl::InvalidArgumentError(
        absl::StrCat("config.json: field ", field, " out of range: ", it->get<uint64_t>()));
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
        absl::StrCat("config.json: field ", field, " must be a number, got ", Shown(*it)));
  }
  return it->get<float>();
}

// bos/eos may be an integer, a list of integers (Llama 3.x Instruct's eos: end of text and
// the end-of-turn ids) or null (`fallback`). Ids past int32 are refused, not wrapped.
absl::StatusOr<std::vector<int>> TokenIds(const nlohmann::json& j, const char* field, int fallback,
                                          const char* file = "config.json") {
  auto it = j.find(field);
  if (it == j.end() || it->is_null()) return std::vector<int>{fallback};
  const bool list = it->is_array();
  if (list && it->empty()) return std::vector<int>{fallback};
  std::vector<int> ids;
  for (const nlohmann::json& v : list ? *it : nlohmann::json::array({*it})) {
    if (!v.is_number_integer()) {
      return absl::InvalidArgumentError(absl::StrCat(
          file, ": field ", field, " must be an integer or a list of integers, got ", Shown(v)));
    }
    if ((v.is_number_unsigned() && v.get<uint64_t>() > uint64_t{INT32_MAX}) ||
        (!v.is_number_unsigned() && (v.get<int64_t>() < 0 || v.get<int64_t>() > INT32_MAX))) {
      return absl::InvalidArgumentError(absl::StrCat(file, ": field ", field, " holds ", Shown(v),
                                                     ", not a token id (0 to 2^31 - 1)"));
    }
    ids.push_back(static_cast<int>(v.get<int64_t>()));
  }
  return ids;
}

// Fields that do not change the forward pass: bookkeeping, training-only settings (dropout,
// initialisation, tensor-parallel slicing that computes the same sums), and generation
// defaults (Saturn takes sampling settings per request).
constexpr const char* kIgnoredFields[] = {"_name_or_path",
                                          "transformers_version",
                                          "torch_dtype",
                                          "use_cache",
                                          "initializer_range",
                                          "attention_dropout",
                                          "hidden_dropout",
                                          "embd_pdrop",
                                          "resid_pdrop",
                                          "pretraining_tp",
                                          "pad_token_id",
                                          "sep_token_id",
                                          "decoder_start_token_id",
                                          "_attn_implementation",
                                          "_attn_implementation_autoset",
                                          "output_attentions",
                                          "output_hidden_states",
                                          "return_dict",
                                          "torchscript",
                                          "use_bfloat16",
                                          "tf_legacy_loss",
                                          "chunk_size_feed_forward",
                                          "id2label",
                                          "label2id",
                                          "problem_type",
                                          "finetuning_task",
                                          "tokenizer_class",
                                          "prefix",
                                          "task_specific_params",
                                          "is_decoder",
                                          "cross_attention_hidden_size",
                                          "max_length",
                                          "min_length",
                                          "do_sample",
                                          "early_stopping",
                                          "num_beams",
                                          "num_beam_groups",
                                          "diversity_penalty",
                                          "temperature",
                                          "top_k",
                                          "top_p",
                                          "typical_p",
                                          "repetition_penalty",
                                          "length_penalty",
                                          "no_repeat_ngram_size",
                                          "encoder_no_repeat_ngram_size",
                                          "bad_words_ids",
                                          "num_return_sequences",
                                          "output_scores",
                                          "return_dict_in_generate",
                                          "forced_bos_token_id",
                                          "forced_eos_token_id",
                                          "remove_invalid_values",
                                          "exponential_decay_length_penalty",
                                          "suppress_tokens",
                                          "begin_suppress_tokens"};

// Fields Saturn implements (read below).
constexpr const char* kImplementedFields[] = {"architectures",
                                              "model_type",
                                              "vocab_size",
                                              "hidden_size",
                                              "intermediate_size",
                                              "num_hidden_layers",
                                              "num_attention_heads",
                                              "num_key_value_heads",
                                              "head_dim",
                                              "max_position_embeddings",
                                              "rms_norm_eps",
                                              "rope_theta",
                                              "rope_scaling",
                                              "tie_word_embeddings",
                                              "bos_token_id",
                                              "eos_token_id",
                                              "hidden_act",
                                              "attention_bias",
                                              "mlp_bias",
                                              "sliding_window",
                                              "use_sliding_window",
                                              "max_window_layers",
                                              "partial_rotary_factor",
                                              "is_encoder_decoder",
                                              "add_cross_attention",
                                              "tie_encoder_decoder",
                                              "pruned_heads"};

absl::Status Refuse(const std::string& what) {
  return absl::UnimplementedError(
      absl::StrCat("config.json: ", what,
                   "; Saturn refuses to load a checkpoint it would compute wrongly "
                   "(docs/CHECKPOINTS.md lists what it implements)"));
}

// A field that is harmless only at its default: absent, null, or equal to `harmless`.
absl::Status RequireDefault(const nlohmann::json& j, const char* field,
                            const nlohmann::json& harmless, const std::string& why) {
  auto it = j.find(field);
  if (it == j.end() || it->is_null() || *it == harmless) return absl::OkStatus();
  return Refuse(absl::StrCat(field, " = ", Shown(*it), " is not implemented (", why, ")"));
}

absl::StatusOr<float> RopeNumber(const nlohmann::json& r, const char* key) {
  auto it = r.find(key);
  if (it == r.end() || !it->is_number()) {
    return absl::InvalidArgumentError(
        absl::StrCat("config.json: rope_scaling.", key, " must be a number for rope_type llama3"));
  }
  const double v = it->get<double>();
  if (!(v > 0) || !std::isfinite(v)) {
    return absl::InvalidArgumentError(
        absl::StrCat("config.json: rope_scaling.", key, " must be positive, got ", Shown(*it)));
  }
  return static_cast<float>(v);
}

// rope_scaling: null, {"rope_type": "default"} or Llama 3.x's {"rope_type": "llama3", factor,
// low_freq_factor, high_freq_factor, original_max_position_embeddings}; "type" is the older
// spelling of "rope_type". Every other type (linear, dynamic, yarn, longrope, ...) is refused.
absl::Status ParseRopeScaling(const nlohmann::json& j, ModelConfig* c) {
  auto it = j.find("rope_scaling");
  if (it == j.end() || it->is_null()) return absl::OkStatus();
  const nlohmann::json& r = *it;
  if (!r.is_object()) {
    return absl::InvalidArgumentError("config.json: rope_scaling must be an object or null");
  }
  std::string type;
  for (const char* key : {"rope_type", "type"}) {
    if (auto t = r.find(key); t != r.end() && t->is_string()) type = t->get<std::string>();
  }
  if (type == "default") return absl::OkStatus();
  if (type != "llama3") {
    return Refuse(absl::StrCat("rope_scaling type \"", type.empty() ? "<missing>" : type,
                               "\" is not implemented (implemented: llama3, default)"));
  }
  for (const auto& [key, value] : r.items()) {
    if (key != "rope_type" && key != "type" && key != "factor" && key != "low_freq_factor" &&
        key != "high_freq_factor" && key != "original_max_position_embeddings") {
      return Refuse(absl::StrCat("rope_scaling.", key, " is not implemented for rope_type llama3"));
    }
  }
  ASSIGN_OR_RETURN(c->rope_llama3_factor, RopeNumber(r, "factor"));
  ASSIGN_OR_RETURN(c->rope_low_freq_factor, RopeNumber(r, "low_freq_factor"));
  ASSIGN_OR_RETURN(c->rope_high_freq_factor, RopeNumber(r, "high_freq_factor"));
  ASSIGN_OR_RETURN(c->rope_original_max_position,
                   RequiredInt(r, "original_max_position_embeddings"));
  return absl::OkStatus();
}

absl::Status CheckArchitecture(const nlohmann::json& j) {
  bool named = false;
  if (auto it = j.find("architectures"); it != j.end() && !it->is_null()) {
    named = true;
    if (!it->is_array() || it->empty()) {
      return absl::InvalidArgumentError("config.json: architectures must be a non-empty list");
    }
    for (const auto& a : *it) {
      if (!a.is_string() || a.get<std::string>() != "LlamaForCausalLM") {
        return absl::UnimplementedError(
            absl::StrCat("config.json: unsupported architecture ",
                         a.is_string() ? a.get<std::string>() : Shown(a),
                         " (architectures; Saturn runs Llama-style decoders: LlamaForCausalLM)"));
      }
    }
  }
  if (auto it = j.find("model_type"); it != j.end() && !it->is_null()) {
    named = true;
    if (!it->is_string() || it->get<std::string>() != "llama") {
      return absl::UnimplementedError(
          absl::StrCat("config.json: unsupported architecture ",
                       it->is_string() ? it->get<std::string>() : Shown(*it),
                       " (model_type; Saturn runs Llama-style decoders: model_type llama)"));
    }
  }
  if (!named) {
    return absl::UnimplementedError(
        "config.json: unsupported architecture <none> (neither model_type nor architectures "
        "says llama; Saturn runs Llama-style decoders)");
  }
  return absl::OkStatus();
}

// The fields that change the math but that Saturn does not implement, and unknown fields.
absl::Status CheckRefusedFields(const nlohmann::json& j) {
  RETURN_IF_ERROR(RequireDefault(j, "hidden_act", "silu", "Saturn's MLP is SwiGLU with silu"));
  RETURN_IF_ERROR(RequireDefault(j, "attention_bias", false, "q/k/v/o projections without bias"));
  RETURN_IF_ERROR(RequireDefault(j, "mlp_bias", false, "gate/up/down projections without bias"));
  RETURN_IF_ERROR(RequireDefault(j, "use_sliding_window", false, "full causal attention only"));
  RETURN_IF_ERROR(RequireDefault(j, "sliding_window", nullptr, "full causal attention only"));
  RETURN_IF_ERROR(RequireDefault(j, "max_window_layers", nullptr, "full causal attention only"));
  RETURN_IF_ERROR(RequireDefault(j, "partial_rotary_factor", 1.0, "RoPE over the whole head"));
  RETURN_IF_ERROR(RequireDefault(j, "is_encoder_decoder", false, "decoder-only models"));
  RETURN_IF_ERROR(RequireDefault(j, "add_cross_attention", false, "no cross-attention"));
  RETURN_IF_ERROR(RequireDefault(j, "tie_encoder_decoder", false, "decoder-only models"));
  RETURN_IF_ERROR(RequireDefault(j, "pruned_heads", nlohmann::json::object(), "every head"));
  if (j.contains("quantization_config")) {
    return Refuse("quantization_config is not implemented (f32, bf16 and f16 tensors only)");
  }
  if (j.contains("auto_map")) {
    return Refuse("auto_map (custom modelling code) is not implemented");
  }
  auto known = [](const std::string& key) {
    for (const char* f : kImplementedFields) {
      if (key == f) return true;
    }
    for (const char* f : kIgnoredFields) {
      if (key == f) return true;
    }
    return false;
  };
  for (const auto& [key, value] : j.items()) {
    if (!known(key)) {
      return Refuse(absl::StrCat("field ", key, " = ", Shown(value),
                                 " is unknown to Saturn, so it may change the model's math"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<ModelConfig> ParseHfConfigJson(const nlohmann::json& j, const std::string& name) {
  if (!j.is_object()) return absl::InvalidArgumentError("config.json: top level is not an object");
  RETURN_IF_ERROR(CheckArchitecture(j));
  ModelConfig c;
  c.name = name;
  ASSIGN_OR_RETURN(c.vocab_size, RequiredInt(j, "vocab_size"));
  ASSIGN_OR_RETURN(c.hidden_size, RequiredInt(j, "hidden_size"));
  ASSIGN_OR_RETURN(c.intermediate_size, RequiredInt(j, "intermediate_size"));
  ASSIGN_OR_RETURN(c.num_layers, RequiredInt(j, "num_hidden_layers"));
  ASSIGN_OR_RETURN(c.num_heads, RequiredInt(j, "num_attention_heads"));
  ASSIGN_OR_RETURN(c.num_kv_heads, OptionalInt(j, "num_key_value_heads", c.num_heads));
  // An explicit head_dim (Llama 3.x configs carry one) may differ from hidden / heads: the q
  // projection is then [heads * head_dim, hidden] and o_proj its transpose.
  int default_head_dim = c.num_heads > 0 ? c.hidden_size / c.num_heads : 0;
  ASSIGN_OR_RETURN(c.head_dim, OptionalInt(j, "head_dim", default_head_dim));
  ASSIGN_OR_RETURN(c.max_position_embeddings, RequiredInt(j, "max_position_embeddings"));
  ASSIGN_OR_RETURN(c.rms_norm_eps, OptionalFloat(j, "rms_norm_eps", 1e-6f));
  ASSIGN_OR_RETURN(c.rope_theta, OptionalFloat(j, "rope_theta", 10000.0f));
  RETURN_IF_ERROR(ParseRopeScaling(j, &c));
  c.tie_word_embeddings = false;  // the HF PretrainedConfig default for Llama is false
  if (auto it = j.find("tie_word_embeddings"); it != j.end() && !it->is_null()) {
    if (!it->is_boolean()) {
      return absl::InvalidArgumentError("config.json: field tie_word_embeddings must be a bool");
    }
    c.tie_word_embeddings = it->get<bool>();
  }
  ASSIGN_OR_RETURN(const std::vector<int> bos, TokenIds(j, "bos_token_id", c.bos_token_id));
  c.bos_token_id = bos.front();
  ASSIGN_OR_RETURN(const std::vector<int> eos, TokenIds(j, "eos_token_id", c.eos_token_id));
  c.eos_token_id = eos.front();
  c.extra_eos_token_ids.assign(eos.begin() + 1, eos.end());
  RETURN_IF_ERROR(CheckRefusedFields(j));
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

RopeParams ModelConfig::Rope() const {
  RopeParams p(rope_theta);
  if (rope_llama3_factor > 0.0f) {
    p.llama3_factor = rope_llama3_factor;
    p.low_freq_factor = rope_low_freq_factor;
    p.high_freq_factor = rope_high_freq_factor;
    p.original_max_position = static_cast<float>(rope_original_max_position);
  }
  return p;
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
  if (rope_llama3_factor != 0.0f) {
    if (!(rope_llama3_factor >= 1.0f) || !std::isfinite(rope_llama3_factor)) {
      return absl::InvalidArgumentError(
          absl::StrCat("rope_scaling.factor must be >= 1 and finite, got ", rope_llama3_factor));
    }
    if (!(rope_low_freq_factor > 0.0f) || !(rope_high_freq_factor > rope_low_freq_factor) ||
        !std::isfinite(rope_high_freq_factor)) {
      return absl::InvalidArgumentError(
          absl::StrCat("rope_scaling: need 0 < low_freq_factor < high_freq_factor, got ",
                       rope_low_freq_factor, " and ", rope_high_freq_factor));
    }
    RETURN_IF_ERROR(
        Positive("rope_scaling.original_max_position_embeddings", rope_original_max_position));
  }
  if (bos_token_id < 0 || bos_token_id >= vocab_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("bos_token_id ", bos_token_id, " outside [0, vocab_size=", vocab_size, ")"));
  }
  if (eos_token_id < 0 || eos_token_id >= vocab_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("eos_token_id ", eos_token_id, " outside [0, vocab_size=", vocab_size, ")"));
  }
  for (const int id : extra_eos_token_ids) {
    if (id < 0 || id >= vocab_size) {
      return absl::InvalidArgumentError(
          absl::StrCat("eos_token_id: ", id, " outside [0, vocab_size=", vocab_size, ")"));
    }
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
  RETURN_IF_ERROR(CheckJsonDepth(json_text, kMaxFileJsonDepth, "config.json"));
  try {
    nlohmann::json j = nlohmann::json::parse(json_text);
    return ParseHfConfigJson(j, name);
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("config.json: ", e.what()));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("config.json: ", e.what()));
  }
}

absl::Status MergeGenerationConfig(const std::string& json_text, ModelConfig* config) {
  constexpr const char* kFile = "generation_config.json";
  RETURN_IF_ERROR(CheckJsonDepth(json_text, kMaxFileJsonDepth, kFile));
  nlohmann::json j = nlohmann::json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return absl::InvalidArgumentError(absl::StrCat(kFile, ": not valid JSON"));
  if (!j.is_object()) return absl::InvalidArgumentError(absl::StrCat(kFile, ": not an object"));
  ASSIGN_OR_RETURN(const std::vector<int> eos,
                   TokenIds(j, "eos_token_id", config->eos_token_id, kFile));
  for (const int id : eos) {
    if (id < 0 || id >= config->vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat(
          kFile, ": eos_token_id ", id, " outside [0, vocab_size=", config->vocab_size, ")"));
    }
    std::vector<int>& extra = config->extra_eos_token_ids;
    if (id != config->eos_token_id && std::find(extra.begin(), extra.end(), id) == extra.end()) {
      extra.push_back(id);
    }
  }
  return absl::OkStatus();
}

}  // namespace saturn
