// The gpu layer's lines in the text report printed at the end of `record`.
#pragma once

#include <string>
#include <vector>

#include "session/session.h"

namespace eacgm {

// From session.layers[gpu] (status, driver, per-device figures); one line
// per device and per traced process using it.
std::vector<std::string> gpu_report_lines(const Session& session);

}  // namespace eacgm
