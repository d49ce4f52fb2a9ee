// Model weights on the host: seeded random init (parallel, deterministic whatever the thread
// count) and Hugging Face Llama checkpoints (config.json + one or more safetensors shards),
// fused into the runner's layout (wqkv, w_gate_up). Never throws; owns no device memory.
#include "engine/model/weights.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/model/safetensors.h"
#include "kernels/base/json_depth.h"
#include "kernels/base/read_file.h"
#include "kernels/base/split_mix64.h"
#include "kernels/base/status_macros.h"

namespace saturn {
namespace {

namespace fs = std::filesystem;

// One tensor to fill: element i gets std * N(0,1)-ish noise from hash(seed, stream, i), so the
// values do not depend on how elements are split across threads. std == 0 means fill with 1.
struct FillJob {
  float* data;
  size_t n;
  float stddev;
  uint64_t stream;
};

void FillRange(const FillJob& job, uint64_t seed, size_t begin, size_t end) {
  if (job.stddev == 0.0f) {
    std::fill(job.data + begin, job.data + end, 1.0f);
    return;
  }
  const uint64_t base = SplitMix64(seed ^ SplitMix64(job.stream));
  // Irwin-Hall: the sum of four 16-bit uniforms, centred and scaled to unit variance.
  const float scale = job.stddev * std::sqrt(3.0f) / 65536.0f;
  for (size_t i = begin; i < end; ++i) {
    const uint64_t r = SplitMix64(base + i * 0xD1B54A32D192ED03ull);
    const int64_t sum =
        static_cast<int64_t>(r & 0xffff) + ((r >> 16) & 0xffff) + ((r >> 32) & 0xffff) + (r >> 48);
    job.data[i] = static_cast<float>(sum - 131070) * scale;
  }
}

void RunFillJobs(const std::vector<FillJob>& jobs, uint64_t seed) {
  constexpr size_t kChunk = size_t{1} << 20;
  struct Chunk {
    size_t job, begin, end;
  };
  std::vector<Chunk> chunks;
  for (size_t j = 0; j < jobs.size(); ++j) {
    for (size_t b = 0; b < jobs[j].n; b += kChunk) {
      chunks.push_back({j, b, std::min(jobs[j].n, b + kChunk)});
    }
  }
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t c; (c = next.fetch_add(1)) < chunks.size();) {
      FillRange(jobs[chunks[c].job], seed, chunks[c].begin, chunks[c].end);
    }
  };
  const size_t threads = std::clamp<size_t>(std::thread::hardware_concurrency(), 1, 16);
  std::vector<std::thread> pool;
  for (size_t t = 1; t < std::min(threads, chunks.size()); ++t) pool.emplace_back(worker);
  worker();
  for (auto& t : pool) t.join();
}

std::string ShapeString(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

absl::StatusOr<std::string> ReadTextFile(const fs::path& path) {
  return ReadFileBounded(path.string(), kMaxConfigFileBytes);
}

// Maps tensor names to the shard that holds them and reads them with shape checks.
class CheckpointReader {
 public:
  absl::Status Init(const fs::path& dir) {
    const fs::path single = dir / "model.safetensors";
    const fs::path index = dir / "model.safetensors.index.json";
    std::error_code ec;
    if (fs::exists(single, ec)) {
      ASSIGN_OR_RETURN(SafetensorsFile f, SafetensorsFile::Open(single.string()));
      files_.push_back(std::make_unique<SafetensorsFile>(std::move(f)));
      for (const auto& [name, info] : files_[0]->tensors()) where_[name] = files_[0].get();
      source_ = single.string();
      return absl::OkStatus();
    }
    if (!fs::exists(index, ec)) {
      return absl::NotFoundError(absl::StrCat(dir.string(),
                                              ": has neither model.safetensors nor "
                                              "model.safetensors.index.json"));
    }
    source_ = index.string();
    ASSIGN_OR_RETURN(std::string text, ReadTextFile(index));
    RETURN_IF_ERROR(CheckJsonDepth(text, kMaxFileJsonDepth, source_));
    nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object() || !j.contains("weight_map") ||
        !j["weight_map"].is_object()) {
      return absl::InvalidArgumentError(source_ + ": expected a JSON object with weight_map");
    }
    std::map<std::string, SafetensorsFile*> shards;
    for (const auto& [tensor, shard] : j["weight_map"].items()) {
      if (!shard.is_string()) {
        return absl::InvalidArgumentError(source_ + ": weight_map[" + tensor + "] not a string");
      }
      const std::string shard_name = shard.get<std::string>();
      // A shard is a file beside the index: a path ("../x", "/x", "a/b") would open files
      // outside the checkpoint.
      if (shard_name.empty() || shard_name == "." || shard_name == ".." ||
          shard_name.find_first_of("/\\") != std::string::npos) {
        return absl::InvalidArgumentError(
            absl::StrCat(source_, ": weight_map[", tensor, "] = \"", shard_name.substr(0, 120),
                         "\" is not a file name in the checkpoint directory"));
      }
      auto it = shards.find(shard_name);
      if (it == shards.end()) {
        ASSIGN_OR_RETURN(SafetensorsFile f, SafetensorsFile::Open((dir / shard_name).string()));
        files_.push_back(std::make_unique<SafetensorsFile>(std::move(f)));
        it = shards.emplace(shard_name, files_.back().get()).first;
      }
      where_[tensor] = it->second;
    }
    return absl::OkStatus();
  }

  // Reads `name`, which must have exactly `shape`.
  absl::StatusOr<std::vector<float>> Read(const std::string& name,
                                          const std::vector<int64_t>& shape) const {
    auto it = where_.find(name);
    if (it == where_.end()) {
      return absl::NotFoundError(absl::StrCat("tensor ", name, " not found in ", source_));
    }
    const SafetensorsFile& file = *it->second;
    auto info = file.tensors().find(name);
    if (info == file.tensors().end()) {
      return absl::NotFoundError(absl::StrCat("tensor ", name, " not found in ", file.path(), " (",
                                              source_, " says it is there)"));
    }
    if (info->second.shape != shape) {
      return absl::InvalidArgumentError(absl::StrCat(
          file.path(), ": tensor ", name, " has shape ", ShapeString(info->second.shape),
          " but config.json implies ", ShapeString(shape)));
    }
    used_.insert(name);
    ASSIGN_OR_RETURN(std::vector<float> values, file.ReadF32(name));
    // A NaN or inf weight makes every logit it reaches NaN: greedy decoding then answers token
    // 0 (or whatever the NaN-skipping argmax leaves) with HTTP 200. Refused here, by name.
    for (size_t i = 0; i < values.size(); ++i) {
      if (!std::isfinite(values[i])) {
        return absl::InvalidArgumentError(absl::StrCat(file.path(), ": tensor ", name, " holds ",
                                                       values[i], " at element ", i,
                                                       " (weights must be finite)"));
      }
    }
    return values;
  }

  bool Has(const std::string& name) const { return where_.count(name) > 0; }

  // Every tensor of every file (and of the index) must have been read: a tensor Saturn does
  // not use (a bias, a sliding-window mask, a quantisation scale, another architecture's
  // layer) means the checkpoint computes something Saturn would not.
  absl::Status CheckAllUsed() const {
    std::vector<std::string> unused;
    std::set<std::string> names;
    for (const auto& [name, file] : where_) names.insert(name);
    for (const auto& f : files_) {
      for (const auto& [name, info] : f->tensors()) names.insert(name);
    }
    for (const std::string& name : names) {
      if (!used_.count(name)) unused.push_back(name);
    }
    if (unused.empty()) return absl::OkStatus();
    const size_t shown = std::min<size_t>(unused.size(), 5);
    return absl::UnimplementedError(absl::StrCat(
        source_, ": ", unused.size(), " tensor(s) that Saturn's Llama does not use, e.g. ",
        absl::StrJoin(unused.begin(), unused.begin() + shown, ", "),
        "; refusing to load a checkpoint it would compute wrongly (docs/CHECKPOINTS.md)"));
  }

 private:
  std::string source_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, const SafetensorsFile*> where_;
  mutable std::set<std::string> used_;
};

// Older Llama conversions store each layer's RoPE inverse frequencies as a buffer; they are
// accepted when they equal what Saturn computes from config.json (else the checkpoint rotates
// differently and is refused).
absl::Status CheckRotaryBuffer(const CheckpointReader& reader, const std::string& name,
                               const ModelConfig& config) {
  const int64_t half = config.head_dim / 2;
  ASSIGN_OR_RETURN(std::vector<float> stored, reader.Read(name, {half}));
  const RopeParams rope = config.Rope();
  for (int64_t i = 0; i < half; ++i) {
    const double want = RopeInvFreq(rope, static_cast<int>(i), config.head_dim);
    if (std::abs(stored[i] - want) > 1e-5 * want + 1e-30) {
      return absl::UnimplementedError(
          absl::StrCat(name, "[", i, "] = ", stored[i], " but config.json's RoPE gives ", want,
                       "; this checkpoint rotates differently from what Saturn implements"));
    }
  }
  return absl::OkStatus();
}

void Append(std::vector<float>* dst, const std::vector<float>& src) {
  dst->insert(dst->end(), src.begin(), src.end());
}

}  // namespace

absl::StatusOr<ModelWeights> RandomWeights(const ModelConfig& config, uint64_t seed) {
  RETURN_IF_ERROR(config.Validate());
  const size_t V = config.vocab_size, D = config.hidden_size, F = config.intermediate_size;
  const size_t Q = size_t(config.num_heads) * config.head_dim;
  const size_t KV = size_t(config.num_kv_heads) * config.head_dim;
  // Residual-branch outputs are scaled down by 1/sqrt(2L) (GPT-2 style) so the residual stream
  // stays O(1) through all layers.
  const float out_scale = 1.0f / std::sqrt(2.0f * config.num_layers);
  ModelWeights w;
  w.config = config;
  std::vector<FillJob> jobs;
  uint64_t stream = 0;
  auto add = [&](std::vector<float>* v, size_t n, float stddev) {
    v->resize(n);
    jobs.push_back({v->data(), n, stddev, stream++});
  };
  try {
    // Embedding rows of norm ~2 (std 2/sqrt(D)): with tied weights the logits are dot
    // products of a unit-RMS hidden state with these rows, so their spread stays O(1) and
    // temperature sampling has a real distribution to draw from.
    add(&w.embedding, V * D, 2.0f / std::sqrt(float(D)));
    w.layers.resize(config.num_layers);
    for (LayerWeights& l : w.layers) {
      add(&l.attn_norm, D, 0.0f);
      add(&l.wqkv, (Q + 2 * KV) * D, 1.0f / std::sqrt(float(D)));
      add(&l.wo, D * Q, out_scale / std::sqrt(float(Q)));
      add(&l.mlp_norm, D, 0.0f);
      add(&l.w_gate_up, 2 * F * D, 1.0f / std::sqrt(float(D)));
      add(&l.w_down, D * F, out_scale / std::sqrt(float(F)));
    }
    add(&w.final_norm, D, 0.0f);
    if (!config.tie_word_embeddings) add(&w.lm_head, V * D, 1.0f / std::sqrt(float(D)));
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError(
        absl::StrCat("not enough host memory for ", config.NumParameters(), " f32 parameters"));
  }
  RunFillJobs(jobs, seed);
  return w;
}

absl::StatusOr<ModelWeights> LoadHfCheckpoint(const std::string& dir) {
  const fs::path root(dir);
  ASSIGN_OR_RETURN(std::string config_text, ReadTextFile(root / "config.json"));
  ASSIGN_OR_RETURN(ModelConfig config, ParseHfConfig(config_text, dir));
  if (fs::exists(root / "generation_config.json")) {
    ASSIGN_OR_RETURN(std::string generation, ReadTextFile(root / "generation_config.json"));
    absl::Status merged = MergeGenerationConfig(generation, &config);
    if (!merged.ok()) {
      return absl::Status(merged.code(), absl::StrCat(dir, "/", merged.message()));
    }
  }
  CheckpointReader reader;
  RETURN_IF_ERROR(reader.Init(root));

  const int64_t V = config.vocab_size, D = config.hidden_size, F = config.intermediate_size;
  const int64_t Q = int64_t{config.num_heads} * config.head_dim;
  const int64_t KV = int64_t{config.num_kv_heads} * config.head_dim;
  ModelWeights w;
  w.config = config;
  try {
    ASSIGN_OR_RETURN(w.embedding, reader.Read("model.embed_tokens.weight", {V, D}));
    w.layers.resize(config.num_layers);
    for (int i = 0; i < config.num_layers; ++i) {
      const std::string p = absl::StrCat("model.layers.", i, ".");
      LayerWeights& l = w.layers[i];
      ASSIGN_OR_RETURN(l.attn_norm, reader.Read(p + "input_layernorm.weight", {D}));
      ASSIGN_OR_RETURN(l.mlp_norm, reader.Read(p + "post_attention_layernorm.weight", {D}));
      ASSIGN_OR_RETURN(std::vector<float> q, reader.Read(p + "self_attn.q_proj.weight", {Q, D}));
      ASSIGN_OR_RETURN(std::vector<float> k, reader.Read(p + "self_attn.k_proj.weight", {KV, D}));
      ASSIGN_OR_RETURN(std::vector<float> v, reader.Read(p + "self_attn.v_proj.weight", {KV, D}));
      l.wqkv = std::move(q);
      l.wqkv.reserve((Q + 2 * KV) * D);
      Append(&l.wqkv, k);
      Append(&l.wqkv, v);
      ASSIGN_OR_RETURN(l.wo, reader.Read(p + "self_attn.o_proj.weight", {D, Q}));
      ASSIGN_OR_RETURN(std::vector<float> gate, reader.Read(p + "mlp.gate_proj.weight", {F, D}));
      ASSIGN_OR_RETURN(std::vector<float> up, reader.Read(p + "mlp.up_proj.weight", {F, D}));
      l.w_gate_up = std::move(gate);
      l.w_gate_up.reserve(2 * F * D);
      Append(&l.w_gate_up, up);
      ASSIGN_OR_RETURN(l.w_down, reader.Read(p + "mlp.down_proj.weight", {D, F}));
    }
    ASSIGN_OR_RETURN(w.final_norm, reader.Read("model.norm.weight", {D}));
    if (!config.tie_word_embeddings) {
      ASSIGN_OR_RETURN(w.lm_head, reader.Read("lm_head.weight", {V, D}));
    } else if (reader.Has("lm_head.weight")) {
      // A tied checkpoint may still carry lm_head.weight: it must be the embedding's copy.
      ASSIGN_OR_RETURN(std::vector<float> head, reader.Read("lm_head.weight", {V, D}));
      if (head != w.embedding) {
        return absl::UnimplementedError(
            absl::StrCat(dir,
                         ": config.json says tie_word_embeddings but lm_head.weight differs "
                         "from model.embed_tokens.weight; set tie_word_embeddings false to "
                         "use it"));
      }
    }
    for (int i = 0; i < config.num_layers; ++i) {
      const std::string name = absl::StrCat("model.layers.", i, ".self_attn.rotary_emb.inv_freq");
      if (reader.Has(name)) RETURN_IF_ERROR(CheckRotaryBuffer(reader, name, config));
    }
    RETURN_IF_ERROR(reader.CheckAllUsed());
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError(absl::StrCat(dir, ": not enough host memory for ",
                                                     config.NumParameters(), " f32 parameters"));
  }
  return w;
}

namespace {

nlohmann::json RopeScalingJson(const ModelConfig& c) {
  if (c.rope_llama3_factor == 0.0f) return nullptr;
  return {{"rope_type", "llama3"},
          {"factor", c.rope_llama3_factor},
          {"low_freq_factor", c.rope_low_freq_factor},
          {"high_freq_factor", c.rope_high_freq_factor},
          {"original_max_position_embeddings", c.rope_original_max_position}};
}

// An integer, or the list it was read from when it had more than one id.
nlohmann::json EosJson(const ModelConfig& c) {
  if (c.extra_eos_token_ids.empty()) return c.eos_token_id;
  nlohmann::json ids = nlohmann::json::array({c.eos_token_id});
  for (const int id : c.extra_eos_token_ids) ids.push_back(id);
  return ids;
}

absl::Status SaveHfCheckpointImpl(const ModelWeights& w, const std::string& dir,
                                  const std::string& dtype) {
  const ModelConfig& c = w.config;
  RETURN_IF_ERROR(c.Validate());
  const int64_t V = c.vocab_size, D = c.hidden_size, F = c.intermediate_size;
  const int64_t Q = int64_t{c.num_heads} * c.head_dim, KV = int64_t{c.num_kv_heads} * c.head_dim;
  if (w.layers.size() != size_t(c.num_layers) || w.embedding.size() != size_t(V * D)) {
    return absl::InvalidArgumentError("SaveHfCheckpoint: weights do not match their config");
  }
  std::vector<TensorToWrite> t;
  auto add = [&](std::string name, std::vector<int64_t> shape, const float* begin) {
    size_t n = 1;
    for (int64_t d : shape) n *= d;
    t.push_back({std::move(name), dtype, std::move(shape), std::vector<float>(begin, begin + n)});
  };
  add("model.embed_tokens.weight", {V, D}, w.embedding.data());
  for (int i = 0; i < c.num_layers; ++i) {
    const LayerWeights& l = w.layers[i];
    if (l.wqkv.size() != size_t((Q + 2 * KV) * D) || l.w_gate_up.size() != size_t(2 * F * D) ||
        l.wo.size() != size_t(D * Q) || l.w_down.size() != size_t(D * F) ||
        l.attn_norm.size() != size_t(D) || l.mlp_norm.size() != size_t(D)) {
      return absl::InvalidArgumentError(
          absl::StrCat("SaveHfCheckpoint: layer ", i, " does not match the config"));
    }
    const std::string p = absl::StrCat("model.layers.", i, ".");
    add(p + "input_layernorm.weight", {D}, l.attn_norm.data());
    add(p + "self_attn.q_proj.weight", {Q, D}, l.wqkv.data());
    add(p + "self_attn.k_proj.weight", {KV, D}, l.wqkv.data() + Q * D);
    add(p + "self_attn.v_proj.weight", {KV, D}, l.wqkv.data() + (Q + KV) * D);
    add(p + "self_attn.o_proj.weight", {D, Q}, l.wo.data());
    add(p + "post_attention_layernorm.weight", {D}, l.mlp_norm.data());
    add(p + "mlp.gate_proj.weight", {F, D}, l.w_gate_up.data());
    add(p + "mlp.up_proj.weight", {F, D}, l.w_gate_up.data() + F * D);
    add(p + "mlp.down_proj.weight", {D, F}, l.w_down.data());
  }
  if (w.final_norm.size() != size_t(D)) {
    return absl::InvalidArgumentError("SaveHfCheckpoint: final_norm does not match the config");
  }
  add("model.norm.weight", {D}, w.final_norm.data());
  if (!c.tie_word_embeddings) {
    if (w.lm_head.size() != size_t(V * D)) {
      return absl::InvalidArgumentError("SaveHfCheckpoint: lm_head does not match the config");
    }
    add("lm_head.weight", {V, D}, w.lm_head.data());
  }
  const nlohmann::json config = {{"architectures", {"LlamaForCausalLM"}},
                                 {"model_type", "llama"},
                                 {"vocab_size", c.vocab_size},
                                 {"hidden_size", c.hidden_size},
                                 {"intermediate_size", c.intermediate_size},
                                 {"num_hidden_layers", c.num_layers},
                                 {"num_attention_heads", c.num_heads},
                                 {"num_key_value_heads", c.num_kv_heads},
                                 {"head_dim", c.head_dim},
                                 {"max_position_embeddings", c.max_position_embeddings},
                                 {"rms_norm_eps", c.rms_norm_eps},
                                 {"rope_theta", c.rope_theta},
                                 {"rope_scaling", RopeScalingJson(c)},
                                 {"tie_word_embeddings", c.tie_word_embeddings},
                                 {"bos_token_id", c.bos_token_id},
                                 {"eos_token_id", EosJson(c)},
                                 {"torch_dtype", dtype == "F32"    ? "float32"
                                                 : dtype == "BF16" ? "bfloat16"
                                                                   : "float16"}};
  {
    const fs::path path = fs::path(dir) / "config.json";
    std::ofstream out(path);
    out << config.dump(2) << "\n";
    out.close();
    if (!out) return absl::PermissionDeniedError(absl::StrCat(path.string(), ": write failed"));
  }
  return WriteSafetensors((fs::path(dir) / "model.safetensors").string(), t);
}

}  // namespace

absl::Status SaveHfCheckpoint(const ModelWeights& weights, const std::string& dir,
                              const std::string& dtype) {
  try {
    return SaveHfCheckpointImpl(weights, dir, dtype);
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("SaveHfCheckpoint(", dir, "): ", e.what()));
  }
}

absl::StatusOr<ModelWeights> LoadModel(const std::string& model, uint64_t seed) {
  if (absl::StatusOr<ModelConfig> preset = PresetConfig(model); preset.ok()) {
    return RandomWeights(*preset, seed);
  }
  std::error_code ec;
  if (fs::is_directory(model, ec)) return LoadHfCheckpoint(model);
  if (fs::is_regular_file(model, ec) && fs::path(model).extension() == ".gguf") {
    return LoadGguf(model);
  }
  return absl::InvalidArgumentError(absl::StrCat("model \"", model, "\" is neither a preset (",
                                                 PresetNames(),
                                                 "), a checkpoint directory nor a .gguf file"));
}

}  // namespace saturn
