#pragma once

#include <string>

namespace eacgm {

// `eacgm doctor`: can this machine trace, and what would each layer trace?
// Returns 0 when tracing can work, 1 when something essential is missing.
// `nvml_lib`: the NVML to check (empty: libnvidia-ml.so.1 on the search path).
int run_doctor(const std::string& nvml_lib = "");

}  // namespace eacgm
