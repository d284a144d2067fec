// The CUDA runtime (libcudart) layer's descriptor and its probe rows (probes.cpp).
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "layers/layer.h"

namespace eacgm {

struct ProbeSpec;

const LayerInfo& cuda_layer_info();
std::span<const ProbeSpec> cuda_rows();
// The CUDA runtime's name for an error code ("cudaErrorInsufficientDriver").
std::string_view cuda_error_name(int64_t code);

}  // namespace eacgm
