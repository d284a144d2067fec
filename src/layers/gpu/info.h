// The gpu layer's descriptor.
#pragma once

#include "layers/layer.h"

namespace eacgm {

const LayerInfo& gpu_layer_info();

}  // namespace eacgm
