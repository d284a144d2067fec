// The python layer's live state: the CPython interpreters of the followed processes (found by
// their own structures, registered with the tracer's sampler), their stacks and functions
// (python_profile.h), the line behind each traced call of any layer, and its slow calls.
#pragma once

#include <memory>

#include "layers/layer_runtime.h"

namespace eacgm {

std::unique_ptr<LayerRuntime> make_python_runtime(const LayerRuntimeSetup& setup, LayerHost& host);

}  // namespace eacgm
