// Tensor-parallel weight slices (tp_shard.h).
#include "engine/tp/tp_shard.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "kernels/base/status_macros.h"

namespace saturn {
namespace {

// Rows [row0, row0 + n) of a row-major matrix `cols` wide, appended to `out`.
void AppendRows(const std::vector<float>& m, int64_t cols, int64_t row0, int64_t n,
                std::vector<float>* out) {
  out->insert(out->end(), m.begin() + row0 * cols, m.begin() + (row0 + n) * cols);
}

// Columns [col0, col0 + n) of a row-major [rows, cols] matrix.
std::vector<float> Columns(const std::vector<float>& m, int64_t rows, int64_t cols, int64_t col0,
                           int64_t n) {
  std::vector<float> out(static_cast<size_t>(rows * n));
  for (int64_t r = 0; r < rows; ++r) {
    std::copy_n(m.begin() + r * cols + col0, n, out.begin() + r * n);
  }
  return out;
}

}  // namespace

absl::Status CheckTensorParallel(const ModelConfig& m, int ranks) {
  if (ranks < 1) {
    return absl::InvalidArgumentError(absl::StrCat("tensor_parallel: must be >= 1, got ", ranks));
  }
  auto divides = [&](int t) {
    return m.num_heads % t == 0 && m.num_kv_heads % t == 0 && m.intermediate_size % t == 0;
  };
  if (divides(ranks)) return absl::OkStatus();
  std::vector<int> ok;
  for (int t = 2; t <= m.num_kv_heads; ++t) {
    if (divides(t)) ok.push_back(t);
  }
  const char* field = m.num_heads % ranks != 0      ? "num_heads"
                      : m.num_kv_heads % ranks != 0 ? "num_kv_heads"
                                                    : "intermediate_size";
  const int value = m.num_heads % ranks != 0      ? m.num_heads
                    : m.num_kv_heads % ranks != 0 ? m.num_kv_heads
                                                  : m.intermediate_size;
  return absl::InvalidArgumentError(
      absl::StrCat("tensor_parallel: ", ranks, " does not divide ", field, " ", value, " of model ",
                   m.name, " (each rank holds whole heads and whole GQA groups); degrees that do: ",
                   ok.empty() ? "none above 1" : absl::StrJoin(ok, ", ")));
}

std::vector<int64_t> VocabCounts(int vocab, int ranks) {
  std::vector<int64_t> counts(std::max(1, ranks), vocab / std::max(1, ranks));
  for (int r = 0; r < vocab % std::max(1, ranks); ++r) ++counts[r];
  return counts;
}

ModelConfig ShardConfig(const ModelConfig& m, int ranks) {
  ModelConfig s = m;
  s.num_heads = m.num_heads / ranks;
  s.num_kv_heads = m.num_kv_heads / ranks;
  s.intermediate_size = m.intermediate_size / ranks;
  return s;
}

absl::StatusOr<ModelWeights> ShardWeights(ModelWeights full, int rank, int ranks) {
  const ModelConfig& m = full.config;
  RETURN_IF_ERROR(CheckTensorParallel(m, ranks));
  if (rank < 0 || rank >= ranks) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", rank, " is not in [0, ", ranks, ")"));
  }
  if (ranks == 1) return full;
  const int64_t d = m.hidden_size, hd = m.head_dim, hq = int64_t{m.num_heads} * hd,
                hkv = int64_t{m.num_kv_heads} * hd, f = m.intermediate_size;
  const int64_t hq_r = hq / ranks, hkv_r = hkv / ranks, f_r = f / ranks;
  for (LayerWeights& l : full.layers) {
    if (static_cast<int64_t>(l.wqkv.size()) != (hq + 2 * hkv) * d ||
        static_cast<int64_t>(l.w_gate_up.size()) != 2 * f * d ||
        static_cast<int64_t>(l.wo.size()) != d * hq ||
        static_cast<int64_t>(l.w_down.size()) != d * f) {
      return absl::InvalidArgumentError("weights: a layer's matrices do not match the config");
    }
    std::vector<float> qkv;
    qkv.reserve(static_cast<size_t>((hq_r + 2 * hkv_r) * d));
    AppendRows(l.wqkv, d, rank * hq_r, hq_r, &qkv);
    AppendRows(l.wqkv, d, hq + rank * hkv_r, hkv_r, &qkv);
    AppendRows(l.wqkv, d, hq + hkv + rank * hkv_r, hkv_r, &qkv);
    l.wqkv = std::move(qkv);
    std::vector<float> gate_up;
    gate_up.reserve(static_cast<size_t>(2 * f_r * d));
    AppendRows(l.w_gate_up, d, rank * f_r, f_r, &gate_up);
    AppendRows(l.w_gate_up, d, f + rank * f_r, f_r, &gate_up);
    l.w_gate_up = std::move(gate_up);
    l.wo = Columns(l.wo, d, hq, rank * hq_r, hq_r);
    l.w_down = Columns(l.w_down, d, f, rank * f_r, f_r);
  }
  const std::vector<int64_t> counts = VocabCounts(m.vocab_size, ranks);
  int64_t first = 0;
  for (int r = 0; r < rank; ++r) first += counts[r];
  std::vector<float> head;
  AppendRows(m.tie_word_embeddings ? full.embedding : full.lm_head, d, first, counts[rank], &head);
  full.lm_head = std::move(head);
  return full;
}

}  // namespace saturn
