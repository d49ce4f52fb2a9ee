// The per-family "last launch" table the launchers fill and the occupancy report reads.
// Host-only. Launchers write it on the engine thread while diagnostics threads read it
// (KernelOccupancyReport), so a mutex keeps every record whole: a reader never pairs one
// launch's kernel with another launch's grid or shared-memory size.
#include <array>
#include <mutex>

#include "kernels/cuda/ops.h"

namespace saturn::gpu {
namespace {
std::mutex g_mu;
std::array<LaunchRecord, static_cast<size_t>(KernelFamily::kCount)> g_launches;  // by g_mu
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
  const LaunchRecord r{kernel, grid_blocks, threads, dynamic_smem};
  std::lock_guard<std::mutex> lock(g_mu);
  g_launches[static_cast<size_t>(f)] = r;
}

LaunchRecord LastLaunch(KernelFamily f) {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_launches[static_cast<size_t>(f)];
}

}  // namespace saturn::gpu
