// NvmlGpuUtilizationPercent: nvidia-smi's utilization.gpu through libnvidia-ml.so.1, loaded
// at run time so that the build needs no NVML headers and machines without the driver's
// library still run (the call then returns UNAVAILABLE). The few NVML types are declared
// here. NVML is initialised once per process and shut down at exit.
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <cstdlib>
#include <mutex>
#include <string>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/cuda_backend.h"

namespace saturn {
namespace {

// From nvml.h (stable ABI): return codes are ints, 0 is NVML_SUCCESS.
using nvmlReturn_t = int;
struct nvmlDevice_st;
using nvmlDevice_t = nvmlDevice_st*;
struct nvmlUtilization_t {
  unsigned int gpu;     // percent of time a kernel was running
  unsigned int memory;  // percent of time device memory was read or written
};

class Nvml {
 public:
  static Nvml& Get() {
    static Nvml* nvml = new Nvml();  // intentionally leaked: no shutdown-order races
    return *nvml;
  }

  absl::StatusOr<int> Utilization(int device) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!load_error_.empty()) return absl::UnavailableError(load_error_);
    nvmlDevice_t dev = nullptr;
    nvmlReturn_t r = -1;
    char bus_id[32] = {0};
    // CUDA and NVML may number devices differently (CUDA_VISIBLE_DEVICES): match by PCI bus.
    if (get_by_pci_ != nullptr &&
        cudaDeviceGetPCIBusId(bus_id, sizeof(bus_id), device) == cudaSuccess) {
      r = get_by_pci_(bus_id, &dev);
    } else {
      (void)cudaGetLastError();
    }
    if (r != 0) r = get_by_index_(static_cast<unsigned>(device), &dev);
    if (r != 0) {
      return absl::UnavailableError(absl::StrCat("NVML: no handle for device ", device, ": ",
                                                 error_string_ ? error_string_(r) : "error"));
    }
    nvmlUtilization_t u{};
    r = get_utilization_(dev, &u);
    if (r != 0) {
      return absl::UnavailableError(absl::StrCat("NVML: nvmlDeviceGetUtilizationRates: ",
                                                 error_string_ ? error_string_(r) : "error"));
    }
    return static_cast<int>(u.gpu);
  }

 private:
  Nvml() {
    lib_ = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib_ == nullptr) {
      const char* err = dlerror();
      load_error_ = absl::StrCat("NVML unavailable: ", err ? err : "libnvidia-ml.so.1 not found");
      return;
    }
    init_ = reinterpret_cast<nvmlReturn_t (*)()>(dlsym(lib_, "nvmlInit_v2"));
    shutdown_ = reinterpret_cast<nvmlReturn_t (*)()>(dlsym(lib_, "nvmlShutdown"));
    get_by_index_ = reinterpret_cast<nvmlReturn_t (*)(unsigned, nvmlDevice_t*)>(
        dlsym(lib_, "nvmlDeviceGetHandleByIndex_v2"));
    get_by_pci_ = reinterpret_cast<nvmlReturn_t (*)(const char*, nvmlDevice_t*)>(
        dlsym(lib_, "nvmlDeviceGetHandleByPciBusId_v2"));
    get_utilization_ = reinterpret_cast<nvmlReturn_t (*)(nvmlDevice_t, nvmlUtilization_t*)>(
        dlsym(lib_, "nvmlDeviceGetUtilizationRates"));
    error_string_ = reinterpret_cast<const char* (*)(nvmlReturn_t)>(dlsym(lib_, "nvmlErrorString"));
    if (init_ == nullptr || shutdown_ == nullptr || get_by_index_ == nullptr ||
        get_utilization_ == nullptr) {
      load_error_ = "NVML unavailable: libnvidia-ml.so.1 lacks an expected symbol";
      return;
    }
    const nvmlReturn_t r = init_();
    if (r != 0) {
      load_error_ = absl::StrCat("NVML unavailable: nvmlInit_v2 returned ", r,
                                 error_string_ ? absl::StrCat(" (", error_string_(r), ")") : "");
      return;
    }
    std::atexit([] { Nvml::Get().Shutdown(); });
  }
  void Shutdown() {
    std::lock_guard<std::mutex> lock(mu_);
    if (load_error_.empty() && shutdown_ != nullptr) (void)shutdown_();
    load_error_ = "NVML shut down";
  }

  std::mutex mu_;
  void* lib_ = nullptr;
  std::string load_error_;
  nvmlReturn_t (*init_)() = nullptr;
  nvmlReturn_t (*shutdown_)() = nullptr;
  nvmlReturn_t (*get_by_index_)(unsigned, nvmlDevice_t*) = nullptr;
  nvmlReturn_t (*get_by_pci_)(const char*, nvmlDevice_t*) = nullptr;
  nvmlReturn_t (*get_utilization_)(nvmlDevice_t, nvmlUtilization_t*) = nullptr;
  const char* (*error_string_)(nvmlReturn_t) = nullptr;
};

}  // namespace

absl::StatusOr<int> NvmlGpuUtilizationPercent(int device) {
  if (device < 0) return absl::InvalidArgumentError("NVML: negative device index");
  return Nvml::Get().Utilization(device);
}

}  // namespace saturn
