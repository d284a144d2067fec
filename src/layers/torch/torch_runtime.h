// The torch layer's live state: operators per thread (which threads run autograd), and the
// unwind guard placed in every library that unwinds stacks through the operators' return probes
// (unwind_stop.h).
#pragma once

#include <memory>

#include "layers/layer_runtime.h"

namespace eacgm {

std::unique_ptr<LayerRuntime> make_torch_runtime(const LayerRuntimeSetup& setup, LayerHost& host);

}  // namespace eacgm
