// The gpu layer's live state: NVML opened (or why not) and its sampler's readings moved into the
// sinks and the monitor at each tick (gpu_layer.h).
#pragma once

#include <memory>

#include "layers/layer_runtime.h"

namespace eacgm {

std::unique_ptr<LayerRuntime> make_gpu_runtime(const LayerRuntimeSetup& setup, LayerHost& host);

}  // namespace eacgm
