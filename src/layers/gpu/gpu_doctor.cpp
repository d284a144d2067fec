#include "layers/gpu/gpu_doctor.h"

#include "layers/gpu/gpu_layer.h"

namespace eacgm {

std::vector<DoctorCheck> gpu_doctor(const DoctorContext& context) {
  // NVML is read from user space: it needs the driver's library and a GPU, never for tracing
  // to work.
  NvmlStatus nvml = probe_nvml(context.nvml_library);
  return {{.name = "gpu (NVML)",
           .ok = nvml.ok,
           .detail = std::move(nvml.detail),
           .found = std::move(nvml.devices)}};
}

}  // namespace eacgm
