// The python layer's part of `eacgm report`'s page: its sampled functions by self time
// (report/layer_page.h).
#pragma once

#include "common/result.h"
#include "report/layer_page.h"

namespace eacgm {

Result<void> python_html_report(report::LayerPage& page);

}  // namespace eacgm
