#include "layers/torch/info.h"

#include "layers/torch/torch_html.h"
#include "layers/torch/torch_runtime.h"

namespace eacgm {
namespace {
// ATen operators' entry points are in libtorch_cpu whatever the device; a libtorch_cuda that
// exports any is probed too.
constexpr std::string_view kTorchLibraries[] = {"libtorch_cpu.so", "libtorch_cuda.so"};
}  // namespace

// Its rows are made at run time from the library's own symbols (layers/torch/torch_ops.h).
const LayerInfo& torch_layer_info() {
  static const LayerInfo info{
      .id = Layer::kTorch,
      .name = "torch",
      .source = LayerSource::kLibraries,
      .libraries = kTorchLibraries,
      .calls_key = "ops",
      .html_report = torch_html_report,
      .self_time = true,
      .duty_cycled = true,
      // PyTorch installed on the machine is common; the job using it is what counts.
      .inactive_unless_mapped = "the job does not use PyTorch",
      .serve_by_default = false,
      .make_runtime = make_torch_runtime};
  return info;
}

}  // namespace eacgm
