// Causal paged attention on the CPU with GQA: validation, tiling and scheduling. A tile is
// up to kAttnTileRows (query row, head) pairs of one sequence sharing a KV head (a prefill
// chunk's rows times the heads of a GQA group; a decode row's group of heads); the tile
// kernel (attention_tile.inc, per instruction-set level) streams the sequence's keys and
// values once per tile with an online softmax in f32. Tiles run on the pool, longest first.
// The caches hold f32 or bf16 (both the same); bf16 rows are widened as they are loaded.
//
//   k_cache rows:  [ block 0 | block 1 | ... ]  each block_size rows of Hkv*hd elements
//   sequence s, position p  ->  row block_tables[s][p / block_size] * block_size + p % block_size
//
// Device data (query_start, context_lens, block_tables) is validated first, so a bad batch
// returns InvalidArgument and reads nothing out of bounds.
#include <algorithm>
#include <vector>

#include "kernels/cpu/isa_kernels.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/stream_memory.h"

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

}  // namespace

absl::Status Attention(ThreadPool& pool, const IsaKernels& kernels, const Tensor& q,
                       const Tensor& k_cache, const Tensor& v_cache, const AttentionBatch& batch,
                       const AttentionShape& shape, const Tensor& out, bool batch_invariant) {
  for (auto [name, t] : {std::pair{"q", &q}, std::pair{"out", &out}}) {
    if (absl::Status s = ExpectF32(name, *t); !s.ok()) return s;
  }
  if ((k_cache.dtype != DType::kF32 && k_cache.dtype != DType::kBF16) ||
      v_cache.dtype != k_cache.dtype) {
    return absl::InvalidArgumentError(
        absl::StrCat("k_cache and v_cache must both be f32 or both bf16, not ",
                     DTypeName(k_cache.dtype), " and ", DTypeName(v_cache.dtype)));
  }
  if (absl::Status s = ValidateBatch(batch, shape, q.rows, std::min(k_cache.rows, v_cache.rows));
      !s.ok()) {
    return s;
  }
  if (batch.num_seqs == 0) return absl::OkStatus();
  const int32_t* qs = batch.query_start.as<int32_t>();
  const int32_t* ctx = batch.context_lens.as<int32_t>();
  const int64_t hd = shape.head_dim;
  const int group = shape.num_heads / shape.num_kv_heads;
  // Tiles: runs of up to kAttnTileRows (query row, head) pairs of one sequence and KV head,
  // pair index (row - first row) * group + head-in-group; the longest first, so the dynamic
  // schedule ends on short ones. Batch-invariant, a row's bits must not depend on the batch, on
  // how its prompt was chunked, or on whether it was preempted: prompt rows (before
  // decode_from) take the lanes-over-rows kernel in tiles of any size, and each generated
  // position's row (a decode row, or the same position recomputed after a preemption) a tile
  // of its own GQA group, the decode step's tile (the row-at-a-time kernel where the group has
  // at most kAttnFewRows heads, else lanes over rows).
  struct Work {
    int seq, kv_head;
    int64_t first_pair, num_pairs;
    int64_t cost;  // positions the tile's last row attends
    bool lanes_over_rows;
  };
  std::vector<Work> work;
  auto add = [&](int s, int64_t p0, int64_t n, bool lanes_over_rows) {
    const int64_t len = qs[s + 1] - qs[s];
    const int64_t cost = ctx[s] - len + (p0 + n - 1) / group + 1;
    for (int g = 0; g < shape.num_kv_heads; ++g)
      work.push_back({s, g, p0, n, cost, lanes_over_rows});
  };
  for (int s = 0; s < batch.num_seqs; ++s) {
    const int64_t len = qs[s + 1] - qs[s], start = ctx[s] - len;
    int64_t split = len;  // rows [0, split) in tiles of kAttnTileRows pairs
    if (batch_invariant) {
      const bool prompt = batch.prefill != nullptr && batch.prefill[s] != 0;
      split = batch.decode_from != nullptr
                  ? std::clamp<int64_t>(batch.decode_from[s] - start, 0, len)
                  : (prompt ? len : 0);
    }
    for (int64_t p0 = 0; p0 < split * group; p0 += kAttnTileRows) {
      add(s, p0, std::min<int64_t>(kAttnTileRows, split * group - p0), batch_invariant);
    }
    for (int64_t r = split; r < len; ++r) {  // a decode step's tiles: the row's group
      for (int64_t p0 = 0; p0 < group; p0 += kAttnTileRows) {
        add(s, r * group + p0, std::min<int64_t>(kAttnTileRows, group - p0), group > kAttnFewRows);
      }
    }
  }
  std::stable_sort(work.begin(), work.end(),
                   [](const Work& a, const Work& b) { return a.cost > b.cost; });
  int64_t total_cost = 0;
  for (const Work& w : work) total_cost += w.cost;
  // ~16K positions of work per claimed chunk at least.
  const int64_t grain = std::max<int64_t>(
      1, static_cast<int64_t>(work.size()) * 16384 / std::max<int64_t>(total_cost * hd, 1));
  const size_t scratch_floats = AttnTileScratchFloats(shape.head_dim);
  pool.ParallelFor(static_cast<int64_t>(work.size()), grain, [&](int64_t begin, int64_t end) {
    thread_local AlignedScratch<float> scratch;  // pool threads persist: grown, never zeroed
    const float* qp[kAttnTileRows];
    float* op[kAttnTileRows];
    int32_t limit[kAttnTileRows];
    for (int64_t wi = begin; wi < end; ++wi) {
      const Work& w = work[wi];
      const int64_t len = qs[w.seq + 1] - qs[w.seq];
      AttnTile t;
      t.rows = static_cast<int>(w.num_pairs);
      for (int i = 0; i < t.rows; ++i) {
        const int64_t pair = w.first_pair + i, r = pair / group;
        const int64_t h = int64_t{w.kv_head} * group + pair % group, row = qs[w.seq] + r;
        qp[i] = q.as<float>() + row * q.cols + h * hd;
        op[i] = out.as<float>() + row * out.cols + h * hd;
        limit[i] = static_cast<int32_t>(ctx[w.seq] - len + r + 1);
      }
      t.q = qp;
      t.out = op;
      t.limit = limit;
      t.table = batch.block_tables.as<int32_t>() + w.seq * batch.block_tables.cols;
      t.lanes_over_rows = w.lanes_over_rows;
      t.block_size = shape.block_size;
      const size_t head_offset = static_cast<size_t>(w.kv_head * hd) * DTypeSize(k_cache.dtype);
      t.k_base = static_cast<const char*>(k_cache.data) + head_offset;
      t.v_base = static_cast<const char*>(v_cache.data) + head_offset;
      t.kv_bf16 = k_cache.dtype == DType::kBF16;
      t.row_stride = k_cache.cols;
      t.head_dim = shape.head_dim;
      t.scale = shape.scale;
      kernels.attend_tile(t, scratch.Get(scratch_floats));
    }
  });
  return absl::OkStatus();
}

}  // namespace saturn::cpu
