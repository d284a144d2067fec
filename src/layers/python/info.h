// The python layer's descriptor.
#pragma once

#include "layers/layer.h"

namespace eacgm {

const LayerInfo& python_layer_info();

}  // namespace eacgm
