// The per-family "last launch" table the launchers fill and the occupancy report reads.
// Host-only; ops are issued from one thread per backend, so plain storage suffices.
#include <array>

#include "kernels/cuda/ops.h"

namespace saturn::gpu {
namespace {
std::array<LaunchRecord, static_cast<size_t>(KernelFamily::kCount)> g_launches;
}  // namespace

const char* KernelFamilyName(KernelFamily f) {
  switch (f) {
    case KernelFamily::kEmbedding:
      return "embedding";
    case KernelFamily::kRmsNorm:
      return "rms_norm";
    case KernelFamily::kAddRmsNorm:
      return "add_rms_norm";
    case KernelFamily::kRope:
      return "rope";
    case KernelFamily::kSwiGlu:
      return "swiglu";
    case KernelFamily::kElementwise:
      return "elementwise";
    case KernelFamily::kGatherRows:
      return "gather_rows";
    case KernelFamily::kConvert:
      return "convert_f32_bf16";
    case KernelFamily::kKvWrite:
      return "kv_write";
    case KernelFamily::kAttentionDecode:
      return "attention_decode";
    case KernelFamily::kAttentionPrefill:
      return "attention_prefill";
    case KernelFamily::kSample:
      return "sample";
    case KernelFamily::kCount:
      break;
  }
  return "?";
}

void RecordLaunch(KernelFamily f, const void* kernel, int64_t grid_blocks, int threads,
                  size_t dynamic_smem) {
  g_launches[static_cast<size_t>(f)] = LaunchRecord{kernel, grid_blocks, threads, dynamic_smem};
}

LaunchRecord LastLaunch(KernelFamily f) { return g_launches[static_cast<size_t>(f)]; }

}  // namespace saturn::gpu
