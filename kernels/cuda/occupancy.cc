// KernelOccupancyReport: for each kernel family's latest launch (kernels/cuda/ops.h
// RecordLaunch), the theoretical occupancy from cudaOccupancyMaxActiveBlocksPerMultiprocessor
// against the device's SM count. Reads only; launches nothing.
#include <cuda_runtime_api.h>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/ops.h"

namespace saturn {

absl::StatusOr<std::vector<KernelOccupancy>> KernelOccupancyReport(int device) {
  int sms = 0, max_threads = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  CUDA_CHECK(cudaDeviceGetAttribute(&max_threads, cudaDevAttrMaxThreadsPerMultiProcessor, device));
  std::vector<KernelOccupancy> report;
  for (int f = 0; f < static_cast<int>(gpu::KernelFamily::kCount); ++f) {
    const auto family = static_cast<gpu::KernelFamily>(f);
    const gpu::LaunchRecord rec = gpu::LastLaunch(family);
    if (rec.kernel == nullptr) continue;
    KernelOccupancy k;
    k.family = gpu::KernelFamilyName(family);
    k.grid_blocks = rec.grid_blocks;
    k.threads_per_block = rec.threads;
    k.dynamic_smem_bytes = rec.dynamic_smem;
    k.num_sms = sms;
    CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
        &k.max_active_blocks_per_sm, rec.kernel, rec.threads, rec.dynamic_smem));
    if (max_threads > 0) {
      k.theoretical_occupancy =
          static_cast<double>(k.max_active_blocks_per_sm) * rec.threads / max_threads;
    }
    const double resident = static_cast<double>(k.max_active_blocks_per_sm) * sms;
    k.waves = resident > 0 ? static_cast<double>(rec.grid_blocks) / resident : 0.0;
    k.fills_device = rec.grid_blocks >= sms;
    report.push_back(std::move(k));
  }
  return report;
}

}  // namespace saturn
