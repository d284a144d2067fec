// The os layer's section of the printed report: signals, OOM kills, MAP_POPULATE, large
// mappings, ioctls.
#pragma once

#include <string>
#include <vector>

#include "session/session.h"

namespace eacgm {

std::vector<std::string> os_report_lines(const Session& session, const LayerState& state);

}  // namespace eacgm
