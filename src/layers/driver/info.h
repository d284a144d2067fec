// The CUDA driver API (libcuda) layer's descriptor and its probe rows (probes.cpp).
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "layers/layer.h"

namespace eacgm {

struct ProbeSpec;

const LayerInfo& driver_layer_info();
std::span<const ProbeSpec> driver_rows();
// The CUDA driver's name for a CUresult ("CUDA_ERROR_OUT_OF_MEMORY").
std::string_view cu_result_name(int64_t code);

}  // namespace eacgm
