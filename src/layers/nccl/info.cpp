#include "layers/nccl/info.h"

#include "layers/nccl/nccl_runtime.h"
#include "probes/probe_table.h"

namespace eacgm {
namespace {
constexpr std::string_view kNcclLibraries[] = {"libnccl.so"};
}  // namespace

// Never duty-cycled: the ranks' sequences of collectives must agree (agent/duty_cycle.h).
const LayerInfo& nccl_layer_info() {
  static const LayerInfo info{.id = Layer::kNccl,
                              .name = "nccl",
                              .source = LayerSource::kLibraries,
                              .libraries = kNcclLibraries,
                              .rows = nccl_rows,
                              .status_name = nccl_result_name,
                              .on_gpu = true,
                              .collectives = true,
                              .make_runtime = make_nccl_runtime};
  return info;
}

}  // namespace eacgm
