// The per-family "last launch" table the launchers fill and the occupancy report reads.
// Host-only. Launchers write it on the engine thread while diagnostics threads read it
// (KernelOccupancyReport), so a mutex keeps every record whole: a reader never pairs one
// launch's kernel with another launch's grid or shared-memory size.
#include <array>
#include <mutex>

#include "kernels/base/enum_table.h"
#include "kernels/cuda/ops.h"

namespace saturn::gpu {
namespace {
std::mutex g_mu;
std::array<LaunchRecord, EnumCount<KernelFamily>()> g_launches;  // by g_mu
}  // namespace

const char* KernelFamilyName(KernelFamily f) {
  // In KernelFamily's order (kernels/base/enum_table.h checks the count).
  static constexpr std::array kNames{
      "embedding",      "rms_norm",          "add_rms_norm",      "rope",
      "swiglu",         "elementwise",       "gather_rows",       "convert_f32_bf16",
      "kv_write",       "attention_decode",  "attention_prefill", "sample",
      "gemm_invariant", "attention_combine", "gemm_skinny",       "rope_kv_write"};
  return EnumLookup(kNames, f, "?");
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
