// What one op cost: its kind and class, FLOPs and bytes from the shapes (kernels/op_cost.h),
// the host time spent issuing it and, when timed, its device interval. Plain data shared by
// the backend (which fills it) and the diagnostics (which read it from step records).
#pragma once

#include <array>
#include <cstdint>

#include "kernels/base/enum_table.h"

namespace saturn {

enum class OpKind : uint8_t {
  kEmbedding,
  kGemm,
  kRmsNorm,
  kAddRmsNorm,
  kRope,
  kKvWrite,
  kAttention,
  kSwiGlu,
  kAdd,
  kGatherRows,
  kSample,
  kCopy,
  kRopeKvWrite,    // Rope and KvWrite as one op, where the backend fuses them
  kGemmSwiGlu,     // a GEMM with SwiGLU in its epilogue, where the backend fuses them
  kAllReduce,      // a tensor-parallel group's sum of a sharded layer's partial outputs
  kGatherColumns,  // the group's column slices (a vocabulary-parallel LM head's logits) on rank 0
  kCount
};

// The classes the diagnostics break time down by.
// kComm: collectives between tensor-parallel ranks (time a rank spends in them includes the
// wait for the slowest rank to arrive).
enum class OpClass : uint8_t { kGemm, kAttention, kNorm, kElementwise, kSampling, kComm, kCount };

inline OpClass ClassOf(OpKind k) {
  switch (k) {
    case OpKind::kGemm:
    case OpKind::kGemmSwiGlu:
      return OpClass::kGemm;
    case OpKind::kAttention:
      return OpClass::kAttention;
    case OpKind::kRmsNorm:
    case OpKind::kAddRmsNorm:
      return OpClass::kNorm;
    case OpKind::kSample:
      return OpClass::kSampling;
    case OpKind::kAllReduce:
    case OpKind::kGatherColumns:
      return OpClass::kComm;
    default:
      return OpClass::kElementwise;
  }
}

// Each enumerator's name, in enum order (kernels/base/enum_table.h checks the count).
inline constexpr std::array kOpKindNames{
    "embedding",     "gemm",        "rms_norm",   "add_rms_norm",  "rope",   "kv_write",
    "attention",     "swiglu",      "add",        "gather_rows",   "sample", "copy",
    "rope_kv_write", "gemm_swiglu", "all_reduce", "gather_columns"};
inline constexpr std::array kOpClassNames{"gemm",        "attention", "norm",
                                          "elementwise", "sampling",  "comm"};

inline const char* OpKindName(OpKind k) { return EnumLookup(kOpKindNames, k, "?"); }
inline const char* OpClassName(OpClass c) { return EnumLookup(kOpClassNames, c, "?"); }

struct OpCost {
  double flops = 0;
  double bytes = 0;  // fewest bytes the op must move through device memory
};

struct OpRecord {
  OpKind kind = OpKind::kCount;
  OpCost cost;
  // Host clock, microseconds since the step began: time inside the op's issue call.
  double issue_begin_us = 0;
  double issue_end_us = 0;
  // Device timeline, microseconds since the step began; negative when not timed.
  double device_begin_us = -1;
  double device_end_us = -1;
};

}  // namespace saturn
