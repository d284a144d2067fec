#include "layers/gpu/gpu_html.h"

#include <fmt/format.h>

#include <cmath>
#include <map>

#include "compare/run_data.h"

namespace eacgm {

// One chart a reading, one line a device; a session without readings shows none.
Result<void> gpu_html_report(report::LayerPage& page) {
  const std::vector<compare::GpuReading>& readings = page.run().gpu;
  if (readings.empty()) return {};
  struct Reading {
    const char* title;
    const char* unit;
    double compare::GpuReading::*field;
  };
  static constexpr Reading kReadings[] = {
      {"GPU utilization", "%", &compare::GpuReading::util_pct},
      {"GPU memory used", "bytes", &compare::GpuReading::memory_used_bytes},
      {"GPU power", "W", &compare::GpuReading::power_w},
      {"GPU temperature", "C", &compare::GpuReading::temperature_c},
      {"GPU SM clock", "MHz", &compare::GpuReading::sm_clock_mhz}};
  const report::TimeBins& bins = page.bins();
  std::string html;
  for (const Reading& r : kReadings) {
    std::map<int, std::pair<std::vector<double>, std::vector<double>>> sums;  // device -> sum, n
    for (const compare::GpuReading& g : readings) {
      const double v = g.*r.field;
      const std::ptrdiff_t b = bins.of(g.ts_ns);
      if (std::isnan(v) || b < 0) continue;
      auto& [sum, n] = sums[g.device];
      if (sum.empty()) {
        sum.assign(bins.count, 0);
        n.assign(bins.count, 0);
      }
      sum[static_cast<size_t>(b)] += v;
      n[static_cast<size_t>(b)] += 1;
    }
    if (sums.empty()) continue;
    report::LineChart c = page.chart(r.title, r.unit);
    c.y_format = report::unit_formatter(r.unit);
    for (auto& [device, sn] : sums) {
      // Only the bins with a reading: NVML is sampled more slowly than the bins are cut, and the
      // line joins one reading to the next.
      report::Series series{fmt::format("GPU {}", device), {}, {}};
      for (size_t b = 0; b < bins.count; ++b) {
        if (sn.second[b] == 0) continue;
        series.x.push_back(bins.mid_s(b));
        series.y.push_back(sn.first[b] / sn.second[b]);
      }
      c.series.push_back(std::move(series));
    }
    html += report::line_chart(c);
  }
  if (!html.empty()) page.add_section("gpu", "GPU readings (NVML)", html);
  return {};
}

}  // namespace eacgm
