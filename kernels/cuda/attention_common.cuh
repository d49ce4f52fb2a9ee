// Shared by the paged attention kernels (attention_decode.cu, attention_prefill.cu): their
// argument block and the host-side dtype check and head_dim dispatch. Header-only; no kernels
// and no state. The kernels keep their index arithmetic inline: moving it into helpers here
// changed the code nvcc generates for them.
#pragma once

#include <cstdint>
#include <type_traits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/backend.h"

namespace saturn::gpu {

struct PagedAttentionArgs {
  const int32_t* query_start;
  const int32_t* context_lens;
  const int32_t* block_tables;
  int max_blocks_per_seq;
  int block_size;
  int num_heads;
  int num_kv_heads;
  int head_dim;
  float scale;
};

inline PagedAttentionArgs MakePagedAttentionArgs(const AttentionBatch& b,
                                                 const AttentionShape& sh) {
  return PagedAttentionArgs{b.query_start.as<int32_t>(),
                            b.context_lens.as<int32_t>(),
                            b.block_tables.as<int32_t>(),
                            static_cast<int>(b.block_tables.cols),
                            sh.block_size,
                            sh.num_heads,
                            sh.num_kv_heads,
                            sh.head_dim,
                            sh.scale};
}

inline absl::Status CheckAttentionDtypes(const Tensor& q, const Tensor& k_cache,
                                         const Tensor& v_cache, const Tensor& out) {
  if (q.dtype != k_cache.dtype || q.dtype != v_cache.dtype || q.dtype != out.dtype) {
    return absl::InvalidArgumentError("attention: q, caches and out must share a dtype");
  }
  return absl::OkStatus();
}

// Returns launch(std::integral_constant<int, NPL>{}) for the smallest NPL (head-dim elements
// per lane, head_dim <= 32 * NPL) the kernels are built for; head_dim > 256 is Unimplemented.
template <typename Launch>
absl::Status ByHeadDim(int head_dim, Launch&& launch) {
  if (head_dim <= 32) return launch(std::integral_constant<int, 1>{});
  if (head_dim <= 64) return launch(std::integral_constant<int, 2>{});
  if (head_dim <= 128) return launch(std::integral_constant<int, 4>{});
  if (head_dim <= 256) return launch(std::integral_constant<int, 8>{});
  return absl::UnimplementedError(
      absl::StrCat("attention: head_dim ", head_dim, " > 256 is not supported on CUDA"));
}

}  // namespace saturn::gpu
