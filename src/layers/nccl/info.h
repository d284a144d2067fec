// The NCCL layer's descriptor and its probe rows (probes.cpp).
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "layers/layer.h"

namespace eacgm {

struct ProbeSpec;

const LayerInfo& nccl_layer_info();
std::span<const ProbeSpec> nccl_rows();
// NCCL's name for an ncclResult_t ("ncclSystemError").
std::string_view nccl_result_name(int64_t code);

}  // namespace eacgm
