// NVML opened at run time: dlopen("libnvidia-ml.so.1") (or a given path),
// every function eacgm uses resolved with dlsym, nvmlInit called. A function
// the library lacks stays null and its reading is simply skipped: drivers of
// different ages export different sets, and none of them is essential.
//
// NVML is thread-safe, so one NvmlLibrary is shared by the sampler's threads.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/result.h"
#include "layers/gpu/nvml_api.h"

namespace eacgm {

// The library's entry points; null where the library lacks the function.
struct NvmlFunctions {
  nvml::InitFn init = nullptr;
  nvml::ShutdownFn shutdown = nullptr;
  nvml::ErrorStringFn error_string = nullptr;
  nvml::SystemGetStringFn system_driver_version = nullptr;
  nvml::SystemGetStringFn system_nvml_version = nullptr;
  nvml::DeviceGetCountFn device_count = nullptr;
  nvml::DeviceGetHandleByIndexFn device_handle = nullptr;
  nvml::DeviceGetStringFn device_name = nullptr;
  nvml::DeviceGetStringFn device_uuid = nullptr;
  nvml::DeviceGetUtilizationRatesFn utilization = nullptr;
  nvml::DeviceGetMemoryInfoFn memory_info = nullptr;
  nvml::DeviceGetTemperatureFn temperature = nullptr;
  nvml::DeviceGetUIntFn power_usage = nullptr;  // milliwatts
  nvml::DeviceGetUIntFn power_limit = nullptr;  // milliwatts (enforced)
  nvml::DeviceGetClockInfoFn clock_info = nullptr;
  nvml::DeviceGetUIntFn fan_speed = nullptr;  // percent
  nvml::DeviceGetPcieThroughputFn pcie_throughput = nullptr;
  nvml::DeviceGetClockReasonsFn clock_reasons = nullptr;
  nvml::DeviceGetTotalEccErrorsFn ecc_errors = nullptr;
  nvml::DeviceGetComputeRunningProcessesFn compute_processes = nullptr;
  bool compute_processes_v1 = false;  // fills nvml::ProcessInfoV1, not nvml::ProcessInfo
  nvml::DeviceGetProcessUtilizationFn process_utilization = nullptr;
  nvml::DeviceGetSupportedEventTypesFn supported_event_types = nullptr;
  nvml::EventSetCreateFn event_set_create = nullptr;
  nvml::DeviceRegisterEventsFn register_events = nullptr;
  nvml::EventSetWaitFn event_set_wait = nullptr;
  bool event_set_wait_v1 = false;  // fills nvml::EventDataV1, not nvml::EventData
  nvml::EventSetFreeFn event_set_free = nullptr;
};

// What a device is, read once.
struct NvmlDeviceInfo {
  unsigned index = 0;
  nvml::Device handle = nullptr;
  std::string name;
  std::string uuid;
};

class NvmlLibrary {
 public:
  // The name NVIDIA's driver installs, found on the normal library search path.
  static constexpr const char* kDefaultPath = "libnvidia-ml.so.1";

  // Opens `path` (kDefaultPath when empty) and initialises NVML. The error
  // says why NVML cannot be used, in a sentence fit for summary.json.
  static Result<std::unique_ptr<NvmlLibrary>> open(const std::string& path);
  // For tests: a library whose functions are given rather than loaded; calls
  // fns.init and, at destruction, fns.shutdown.
  static Result<std::unique_ptr<NvmlLibrary>> from_functions(const NvmlFunctions& fns);

  ~NvmlLibrary();
  NvmlLibrary(const NvmlLibrary&) = delete;
  NvmlLibrary& operator=(const NvmlLibrary&) = delete;

  const NvmlFunctions& fn() const { return fn_; }
  const std::string& path() const { return path_; }

  // nvmlErrorString, or the number when the library has no names.
  std::string error_name(nvml::Return code) const;
  std::string driver_version() const;  // empty when unknown
  std::string nvml_version() const;    // empty when unknown
  // Every device NVML can see, with its name and UUID (empty when unknown).
  Result<std::vector<NvmlDeviceInfo>> devices() const;

 private:
  NvmlLibrary(void* handle, std::string path, const NvmlFunctions& fns)
      : handle_(handle), path_(std::move(path)), fn_(fns) {}
  static Result<std::unique_ptr<NvmlLibrary>> initialise(std::unique_ptr<NvmlLibrary> lib);

  void* handle_ = nullptr;  // from dlopen; null for from_functions()
  std::string path_;
  NvmlFunctions fn_;
  bool initialised_ = false;
};

}  // namespace eacgm
