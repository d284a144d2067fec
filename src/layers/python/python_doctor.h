// What `eacgm doctor` says of the python layer: the CPython builds a job started from this shell
// would run, and whether each has USDT probes.
#pragma once

#include <vector>

#include "layers/layer.h"

namespace eacgm {

std::vector<DoctorCheck> python_doctor(const DoctorContext& context);

}  // namespace eacgm
