// The os layer's part of `eacgm report`'s page: the os layer's events a second by kind, and its
// mappings per process (report/layer_page.h).
#pragma once

#include "common/result.h"
#include "report/layer_page.h"

namespace eacgm {

Result<void> os_html_report(report::LayerPage& page);

}  // namespace eacgm
