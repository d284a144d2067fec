#include "layers/layer_runtime.h"

namespace eacgm {

LayerRuntimes make_layer_runtimes(const std::set<Layer>& layers, const LayerRuntimeSetup& setup,
                                  LayerHost& host) {
  LayerRuntimes runtimes;
  for (const LayerInfo* info : layer_registry()) {
    if (!info->make_runtime || !layers.contains(info->id)) continue;
    runtimes.emplace_back(info->id, info->make_runtime(setup, host));
  }
  return runtimes;
}

}  // namespace eacgm
