// What `eacgm doctor` says of the os layer: whether its tracepoints can attach here.
#pragma once

#include <vector>

#include "layers/layer.h"

namespace eacgm {

std::vector<DoctorCheck> os_doctor(const DoctorContext& context);

}  // namespace eacgm
