// What `eacgm doctor` says of the gpu layer: whether NVML loads, and the devices it sees.
#pragma once

#include <vector>

#include "layers/layer.h"

namespace eacgm {

std::vector<DoctorCheck> gpu_doctor(const DoctorContext& context);

}  // namespace eacgm
