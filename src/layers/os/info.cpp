#include "layers/os/info.h"

namespace eacgm {

const LayerInfo& os_layer_info() {
  static const LayerInfo info{
      .id = Layer::kOs, .name = "os", .source = LayerSource::kTracepoints, .calls_key = ""};
  return info;
}

}  // namespace eacgm
