#include "layers/os/info.h"

#include "layers/os/os_doctor.h"
#include "layers/os/os_html.h"
#include "layers/os/os_report.h"
#include "layers/os/os_runtime.h"

namespace eacgm {

const LayerInfo& os_layer_info() {
  static const LayerInfo info{.id = Layer::kOs,
                              .name = "os",
                              .source = LayerSource::kTracepoints,
                              .calls_key = "",
                              .report_lines = os_report_lines,
                              .html_report = os_html_report,
                              .doctor = os_doctor,
                              .make_runtime = make_os_runtime};
  return info;
}

}  // namespace eacgm
