// The python layer's section of the printed report: where the threads that work spend their
// time.
#pragma once

#include <string>
#include <vector>

#include "session/session.h"

namespace eacgm {

std::vector<std::string> python_report_lines(const Session& session, const LayerState& state);

}  // namespace eacgm
