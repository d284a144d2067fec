// The nccl layer's live state: every communicator's collectives, rank by rank, for the straggler
// and hang verdicts (collectives.h) and the ranks' figures in summary.json.
#pragma once

#include <memory>

#include "layers/layer_runtime.h"

namespace eacgm {

std::unique_ptr<LayerRuntime> make_nccl_runtime(const LayerRuntimeSetup& setup, LayerHost& host);

}  // namespace eacgm
