// The torch layer's descriptor.
#pragma once

#include "layers/layer.h"

namespace eacgm {

const LayerInfo& torch_layer_info();

}  // namespace eacgm
