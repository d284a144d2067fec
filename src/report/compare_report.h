// `eacgm compare ... -o report.html`: the comparison as a page. Every regression and improvement
// in a table, then drawn: the base runs' values and the candidate runs' side by side on one
// axis, one dot a window (a run, for whole-run counts), which is exactly what the rank test
// compared; the notes and what only one side ran.
#pragma once

#include <string>
#include <vector>

#include "compare/compare.h"
#include "compare/run_data.h"

namespace eacgm::report {

std::string compare_report_html(const compare::Comparison& comparison,
                                const std::vector<compare::RunData>& base,
                                const std::vector<compare::RunData>& candidate);

}  // namespace eacgm::report
