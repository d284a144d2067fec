// The os layer's descriptor.
#pragma once

#include "layers/layer.h"

namespace eacgm {

const LayerInfo& os_layer_info();

}  // namespace eacgm
