#include "layers/gpu/nvml_library.h"

#include <dlfcn.h>
#include <fmt/format.h>

#include <cstring>
#include <initializer_list>

namespace eacgm {
namespace {

// The first of `names` the library exports. Newer names come first: NVIDIA
// adds a _vN suffix when a struct or semantics change and keeps the old name.
template <typename Fn>
Fn resolve(void* handle, std::initializer_list<const char*> names, int* which = nullptr) {
  int i = 0;
  for (const char* name : names) {
    if (void* sym = dlsym(handle, name)) {
      if (which) *which = i;
      return reinterpret_cast<Fn>(sym);
    }
    ++i;
  }
  return nullptr;
}

NvmlFunctions resolve_all(void* h) {
  NvmlFunctions f;
  f.init = resolve<nvml::InitFn>(h, {"nvmlInit_v2", "nvmlInit"});
  f.shutdown = resolve<nvml::ShutdownFn>(h, {"nvmlShutdown"});
  f.error_string = resolve<nvml::ErrorStringFn>(h, {"nvmlErrorString"});
  f.system_driver_version = resolve<nvml::SystemGetStringFn>(h, {"nvmlSystemGetDriverVersion"});
  f.system_nvml_version = resolve<nvml::SystemGetStringFn>(h, {"nvmlSystemGetNVMLVersion"});
  f.device_count =
      resolve<nvml::DeviceGetCountFn>(h, {"nvmlDeviceGetCount_v2", "nvmlDeviceGetCount"});
  f.device_handle = resolve<nvml::DeviceGetHandleByIndexFn>(
      h, {"nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetHandleByIndex"});
  f.device_name = resolve<nvml::DeviceGetStringFn>(h, {"nvmlDeviceGetName"});
  f.device_uuid = resolve<nvml::DeviceGetStringFn>(h, {"nvmlDeviceGetUUID"});
  f.utilization = resolve<nvml::DeviceGetUtilizationRatesFn>(h, {"nvmlDeviceGetUtilizationRates"});
  f.memory_info = resolve<nvml::DeviceGetMemoryInfoFn>(h, {"nvmlDeviceGetMemoryInfo"});
  f.temperature = resolve<nvml::DeviceGetTemperatureFn>(h, {"nvmlDeviceGetTemperature"});
  f.power_usage = resolve<nvml::DeviceGetUIntFn>(h, {"nvmlDeviceGetPowerUsage"});
  f.power_limit = resolve<nvml::DeviceGetUIntFn>(h, {"nvmlDeviceGetEnforcedPowerLimit"});
  f.clock_info = resolve<nvml::DeviceGetClockInfoFn>(h, {"nvmlDeviceGetClockInfo"});
  f.fan_speed = resolve<nvml::DeviceGetUIntFn>(h, {"nvmlDeviceGetFanSpeed"});
  f.pcie_throughput = resolve<nvml::DeviceGetPcieThroughputFn>(h, {"nvmlDeviceGetPcieThroughput"});
  // "Clocks event reasons" is the newer name (drivers 535+) of the same bits.
  f.clock_reasons = resolve<nvml::DeviceGetClockReasonsFn>(
      h, {"nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"});
  f.ecc_errors = resolve<nvml::DeviceGetTotalEccErrorsFn>(h, {"nvmlDeviceGetTotalEccErrors"});
  int variant = 0;
  f.compute_processes = resolve<nvml::DeviceGetComputeRunningProcessesFn>(
      h,
      {"nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetComputeRunningProcesses_v2",
       "nvmlDeviceGetComputeRunningProcesses"},
      &variant);
  f.compute_processes_v1 = f.compute_processes && variant == 2;
  f.process_utilization =
      resolve<nvml::DeviceGetProcessUtilizationFn>(h, {"nvmlDeviceGetProcessUtilization"});
  f.supported_event_types =
      resolve<nvml::DeviceGetSupportedEventTypesFn>(h, {"nvmlDeviceGetSupportedEventTypes"});
  f.event_set_create = resolve<nvml::EventSetCreateFn>(h, {"nvmlEventSetCreate"});
  f.register_events = resolve<nvml::DeviceRegisterEventsFn>(h, {"nvmlDeviceRegisterEvents"});
  variant = 0;
  f.event_set_wait =
      resolve<nvml::EventSetWaitFn>(h, {"nvmlEventSetWait_v2", "nvmlEventSetWait"}, &variant);
  f.event_set_wait_v1 = f.event_set_wait && variant == 1;
  f.event_set_free = resolve<nvml::EventSetFreeFn>(h, {"nvmlEventSetFree"});
  return f;
}

// Reads a NUL-terminated string through a getter that fills a buffer.
template <typename Getter>
std::string read_string(unsigned size, Getter getter) {
  std::string buffer(size, '\0');
  if (getter(buffer.data(), size) != nvml::kSuccess) return {};
  buffer.resize(strnlen(buffer.data(), size));
  return buffer;
}

}  // namespace

Result<std::unique_ptr<NvmlLibrary>> NvmlLibrary::open(const std::string& path) {
  const std::string name = path.empty() ? kDefaultPath : path;
  // RTLD_LOCAL: NVML's symbols must not resolve anything else in eacgm.
  void* handle = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char* why = dlerror();
    return Error{fmt::format("cannot load NVML: {}", why ? why : name)};
  }
  NvmlFunctions fns = resolve_all(handle);
  return initialise(std::unique_ptr<NvmlLibrary>(new NvmlLibrary(handle, name, fns)));
}

Result<std::unique_ptr<NvmlLibrary>> NvmlLibrary::from_functions(const NvmlFunctions& fns) {
  return initialise(std::unique_ptr<NvmlLibrary>(new NvmlLibrary(nullptr, "(test)", fns)));
}

Result<std::unique_ptr<NvmlLibrary>> NvmlLibrary::initialise(std::unique_ptr<NvmlLibrary> lib) {
  if (!lib->fn_.init) {
    return Error{fmt::format("{} is not NVML: it has no nvmlInit_v2 or nvmlInit", lib->path_)};
  }
  if (!lib->fn_.device_count || !lib->fn_.device_handle) {
    return Error{
        fmt::format("{} has no nvmlDeviceGetCount or nvmlDeviceGetHandleByIndex", lib->path_)};
  }
  if (const nvml::Return r = lib->fn_.init(); r != nvml::kSuccess) {
    // Typically NVML_ERROR_DRIVER_NOT_LOADED: the library is installed but
    // the kernel driver is not (a container without the GPU passed through).
    return Error{fmt::format("nvmlInit failed: {} ({})", lib->error_name(r), r)};
  }
  lib->initialised_ = true;
  return lib;
}

NvmlLibrary::~NvmlLibrary() {
  if (initialised_ && fn_.shutdown) fn_.shutdown();
  // Never dlclose(): the library's own threads or atexit handlers may still
  // run its code after nvmlShutdown. It costs one mapping until eacgm exits.
  (void)handle_;
}

std::string NvmlLibrary::error_name(nvml::Return code) const {
  if (fn_.error_string) {
    if (const char* text = fn_.error_string(code)) return text;
  }
  return fmt::format("NVML error {}", code);
}

std::string NvmlLibrary::driver_version() const {
  if (!fn_.system_driver_version) return {};
  return read_string(nvml::kSystemDriverVersionBufferSize,
                     [this](char* b, unsigned n) { return fn_.system_driver_version(b, n); });
}

std::string NvmlLibrary::nvml_version() const {
  if (!fn_.system_nvml_version) return {};
  return read_string(nvml::kSystemNvmlVersionBufferSize,
                     [this](char* b, unsigned n) { return fn_.system_nvml_version(b, n); });
}

Result<std::vector<NvmlDeviceInfo>> NvmlLibrary::devices() const {
  unsigned count = 0;
  if (const nvml::Return r = fn_.device_count(&count); r != nvml::kSuccess) {
    return Error{fmt::format("nvmlDeviceGetCount failed: {} ({})", error_name(r), r)};
  }
  std::vector<NvmlDeviceInfo> out;
  for (unsigned i = 0; i < count; ++i) {
    NvmlDeviceInfo info;
    info.index = i;
    // A device NVML cannot open (lost, or not ours in a container) is left
    // out; the others are still worth watching.
    if (fn_.device_handle(i, &info.handle) != nvml::kSuccess || !info.handle) continue;
    if (fn_.device_name) {
      info.name = read_string(nvml::kDeviceNameV2BufferSize, [&](char* b, unsigned n) {
        return fn_.device_name(info.handle, b, n);
      });
    }
    if (fn_.device_uuid) {
      info.uuid = read_string(nvml::kDeviceUuidV2BufferSize, [&](char* b, unsigned n) {
        return fn_.device_uuid(info.handle, b, n);
      });
    }
    out.push_back(std::move(info));
  }
  return out;
}

}  // namespace eacgm
