#include "layers/driver/info.h"

#include "probes/probe_table.h"

namespace eacgm {
namespace {
constexpr std::string_view kDriverLibraries[] = {"libcuda.so"};
}  // namespace

const LayerInfo& driver_layer_info() {
  static const LayerInfo info{.id = Layer::kDriver,
                              .name = "driver",
                              .source = LayerSource::kLibraries,
                              .libraries = kDriverLibraries,
                              .rows = driver_rows,
                              .status_name = cu_result_name,
                              .duty_cycled = true,
                              .launches_kernels = true,
                              .on_gpu = true};
  return info;
}

}  // namespace eacgm
