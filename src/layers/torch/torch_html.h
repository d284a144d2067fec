// The torch layer's part of `eacgm report`'s page: its operators by self time
// (report/layer_page.h).
#pragma once

#include "common/result.h"
#include "report/layer_page.h"

namespace eacgm {

Result<void> torch_html_report(report::LayerPage& page);

}  // namespace eacgm
