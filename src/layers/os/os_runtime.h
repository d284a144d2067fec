// The os layer's live state: the kernel's signals, OOM kills, mappings and device ioctls of the
// followed processes (os_monitor.h), the builds of the ML libraries each one maps, and why each
// process ended.
#pragma once

#include <memory>

#include "layers/layer_runtime.h"

namespace eacgm {

std::unique_ptr<LayerRuntime> make_os_runtime(const LayerRuntimeSetup& setup, LayerHost& host);

}  // namespace eacgm
