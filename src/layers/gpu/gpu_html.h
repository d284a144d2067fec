// The gpu layer's part of `eacgm report`'s page: the GPU's NVML readings over time
// (report/layer_page.h).
#pragma once

#include "common/result.h"
#include "report/layer_page.h"

namespace eacgm {

Result<void> gpu_html_report(report::LayerPage& page);

}  // namespace eacgm
