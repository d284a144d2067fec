#include "layers/python/info.h"

#include "layers/python/python_doctor.h"
#include "layers/python/python_html.h"
#include "layers/python/python_report.h"
#include "layers/python/python_runtime.h"

namespace eacgm {

const LayerInfo& python_layer_info() {
  static const LayerInfo info{.id = Layer::kPython,
                              .name = "python",
                              .source = LayerSource::kInterpreters,
                              .calls_key = "functions",
                              .report_lines = python_report_lines,
                              .html_report = python_html_report,
                              .serve_by_default = false,
                              // Per-thread sampling of every Python process on a node is a
                              // profiler's job: record or attach.
                              .not_in_serve =
                                  "per-function figures have no bounded set of "
                                  "metric labels",
                              .doctor = python_doctor,
                              .make_runtime = make_python_runtime};
  return info;
}

}  // namespace eacgm
