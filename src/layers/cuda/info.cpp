#include "layers/cuda/info.h"

#include "probes/probe_table.h"

namespace eacgm {
namespace {
constexpr std::string_view kCudaLibraries[] = {"libcudart.so"};
}  // namespace

const LayerInfo& cuda_layer_info() {
  static const LayerInfo info{.id = Layer::kCuda,
                              .name = "cuda",
                              .source = LayerSource::kLibraries,
                              .libraries = kCudaLibraries,
                              .rows = cuda_rows,
                              .status_name = cuda_error_name,
                              .duty_cycled = true,
                              .launches_kernels = true,
                              .on_gpu = true};
  return info;
}

}  // namespace eacgm
