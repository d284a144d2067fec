#include "layers/gpu/info.h"

#include "layers/gpu/gpu_doctor.h"
#include "layers/gpu/gpu_html.h"
#include "layers/gpu/gpu_report.h"
#include "layers/gpu/gpu_runtime.h"

namespace eacgm {

const LayerInfo& gpu_layer_info() {
  static const LayerInfo info{
      .id = Layer::kGpu,
      .name = "gpu",
      .source = LayerSource::kUserSpace,
      .calls_key = "",
      .report_lines = [](const Session& session,
                         const LayerState&) { return gpu_report_lines(session); },
      .html_report = gpu_html_report,
      .doctor = gpu_doctor,
      .make_runtime = make_gpu_runtime};
  return info;
}

}  // namespace eacgm
