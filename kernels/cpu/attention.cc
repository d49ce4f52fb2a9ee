// Causal paged attention on the CPU with GQA, one (query row, head) pair per work item.
// Each item streams its sequence's cache blocks once with an online softmax in f32: per
// block, scores -> new running max -> rescale the accumulator -> add p * v.
//
//   k_cache rows:  [ block 0 | block 1 | ... ]  each block_size rows of Hkv*hd floats
//   sequence s, position p  ->  row block_tables[s][p / block_size] * block_size + p % block_size
//
// Device data (query_start, context_lens, block_tables) is validated first, so a bad batch
// returns InvalidArgument and reads nothing out of bounds.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/cpu/ops.h"

namespace saturn::cpu {
namespace {

absl::Status ValidateBatch(const AttentionBatch& b, const AttentionShape& shape, int64_t q_rows,
                           int64_t cache_rows) {
  for (auto [name, t] :
       {std::pair{"query_start", &b.query_start}, std::pair{"context_lens", &b.context_lens},
        std::pair{"block_tables", &b.block_tables}}) {
    if (absl::Status s = ExpectDType(name, *t, DType::kI32); !s.ok()) return s;
  }
  if (shape.block_size <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("block_size ", shape.block_size, " <= 0"));
  }
  const int32_t* qs = b.query_start.as<int32_t>();
  const int32_t* ctx = b.context_lens.as<int32_t>();
  const int64_t num_blocks = cache_rows / shape.block_size;
  if (qs[0] < 0 || qs[b.num_seqs] > q_rows) {
    return absl::InvalidArgumentError(absl::StrCat(
        "query_start spans [", qs[0], ", ", qs[b.num_seqs], ") but q has ", q_rows, " rows"));
  }
  for (int s = 0; s < b.num_seqs; ++s) {
    const int64_t len = qs[s + 1] - qs[s];
    if (len < 0 || len > b.max_query_len || len > ctx[s] || ctx[s] > b.max_context_len) {
      return absl::InvalidArgumentError(
          absl::StrCat("sequence ", s, ": query length ", len, " and context length ", ctx[s],
                       " must satisfy 0 <= query <= context, query <= max_query_len (",
                       b.max_query_len, "), context <= max_context_len (", b.max_context_len, ")"));
    }
    const int32_t* table = b.block_tables.as<int32_t>() + s * b.block_tables.cols;
    for (int64_t blk = 0; blk * shape.block_size < ctx[s]; ++blk) {
      if (table[blk] < 0 || table[blk] >= num_blocks) {
        return absl::InvalidArgumentError(
            absl::StrCat("sequence ", s, ": block_tables[", blk, "] = ", table[blk],
                         " is outside the cache's ", num_blocks, " blocks"));
      }
    }
  }
  return absl::OkStatus();
}

struct Item {
  const float* q;  // this head's query vector
  const int32_t* table;
  int64_t num_positions;  // attends to positions [0, num_positions)
  int64_t kv_offset;      // kv head * head_dim within a cache row
  float* out;
};

// One query head against its sequence's cache; scratch holds block_size + head_dim floats.
void AttendOne(const Item& it, const Tensor& k_cache, const Tensor& v_cache,
               const AttentionShape& shape, float* scratch) {
  const int64_t hd = shape.head_dim, bs = shape.block_size, width = k_cache.cols;
  float* scores = scratch;
  float* acc = scratch + bs;
  std::fill(acc, acc + hd, 0.0f);
  float m = -std::numeric_limits<float>::infinity();
  float l = 0.0f;
  for (int64_t start = 0; start < it.num_positions; start += bs) {
    const int64_t base = static_cast<int64_t>(it.table[start / bs]) * bs;
    const int64_t count = std::min(bs, it.num_positions - start);
    float block_max = -std::numeric_limits<float>::infinity();
    for (int64_t j = 0; j < count; ++j) {
      const float* kr = k_cache.as<float>() + (base + j) * width + it.kv_offset;
      scores[j] = Dot(it.q, kr, hd) * shape.scale;
      block_max = std::max(block_max, scores[j]);
    }
    if (block_max > m) {
      const float correction = std::exp(m - block_max);  // 0 on the first block
      for (int64_t d = 0; d < hd; ++d) acc[d] *= correction;
      l *= correction;
      m = block_max;
    }
    for (int64_t j = 0; j < count; ++j) {
      const float p = std::exp(scores[j] - m);
      l += p;
      const float* vr = v_cache.as<float>() + (base + j) * width + it.kv_offset;
      for (int64_t d = 0; d < hd; ++d) acc[d] += p * vr[d];
    }
  }
  const float inv = l > 0.0f ? 1.0f / l : 0.0f;
  for (int64_t d = 0; d < hd; ++d) it.out[d] = acc[d] * inv;
}

}  // namespace

absl::Status Attention(ThreadPool& pool, const Tensor& q, const Tensor& k_cache,
                       const Tensor& v_cache, const AttentionBatch& batch,
                       const AttentionShape& shape, const Tensor& out) {
  for (auto [name, t] : {std::pair{"q", &q}, std::pair{"k_cache", &k_cache},
                         std::pair{"v_cache", &v_cache}, std::pair{"out", &out}}) {
    if (absl::Status s = ExpectF32(name, *t); !s.ok()) return s;
  }
  if (absl::Status s = ValidateBatch(batch, shape, q.rows, std::min(k_cache.rows, v_cache.rows));
      !s.ok()) {
    return s;
  }
  if (batch.num_seqs == 0) return absl::OkStatus();
  const int32_t* qs = batch.query_start.as<int32_t>();
  const int32_t* ctx = batch.context_lens.as<int32_t>();
  // Row -> sequence, so the flat (row, head) index space maps back to its sequence.
  const int64_t first_row = qs[0], num_rows = qs[batch.num_seqs] - qs[0];
  std::vector<int32_t> row_seq(num_rows);
  int64_t longest = 1;
  for (int s = 0; s < batch.num_seqs; ++s) {
    for (int32_t r = qs[s]; r < qs[s + 1]; ++r) row_seq[r - first_row] = s;
    longest = std::max<int64_t>(longest, ctx[s]);
  }
  const int64_t hd = shape.head_dim, heads = shape.num_heads;
  const int64_t group = shape.num_heads / shape.num_kv_heads;
  const int64_t grain = std::max<int64_t>(1, 16384 / (longest * hd));
  pool.ParallelFor(num_rows * heads, grain, [&](int64_t begin, int64_t end) {
    std::vector<float> scratch(shape.block_size + hd);
    for (int64_t item = begin; item < end; ++item) {
      const int64_t row = first_row + item / heads, h = item % heads;
      const int s = row_seq[row - first_row];
      const int64_t len = qs[s + 1] - qs[s];
      Item it;
      it.q = q.as<float>() + row * q.cols + h * hd;
      it.table = batch.block_tables.as<int32_t>() + s * batch.block_tables.cols;
      it.num_positions = ctx[s] - len + (row - qs[s]) + 1;
      it.kv_offset = (h / group) * hd;
      it.out = out.as<float>() + row * out.cols + h * hd;
      AttendOne(it, k_cache, v_cache, shape, scratch.data());
    }
  });
  return absl::OkStatus();
}

}  // namespace saturn::cpu
