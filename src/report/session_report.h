// `eacgm report SESSION -o report.html`: one recorded session as a page people look at rather
// than read. Calls and latency over time per layer, device memory per process, the os layer's
// events, GPU readings, every anomaly marked where it happened; each NCCL communicator's
// per-rank lateness as a heatmap; the top APIs, operators, kernels and Python functions.
// docs/REPORT.md shows one.
#pragma once

#include <string>

#include "common/result.h"

namespace eacgm::report {

// The page, or why the directory is not a session that can be shown (one line naming it).
Result<std::string> session_report_html(const std::string& dir);

}  // namespace eacgm::report
