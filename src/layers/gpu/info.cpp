#include "layers/gpu/info.h"

namespace eacgm {

const LayerInfo& gpu_layer_info() {
  static const LayerInfo info{
      .id = Layer::kGpu, .name = "gpu", .source = LayerSource::kUserSpace, .calls_key = ""};
  return info;
}

}  // namespace eacgm
