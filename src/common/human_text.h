// Sizes, durations and table widths as the report, the anomalies and every message show them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace eacgm {

// "512 B", "1.5 MiB".
std::string human_bytes(double bytes);
// "850 ns", "12.3 us", "4.56 ms", "1.20 s".
std::string human_ns(double ns);
// "4.50 us", "12.00/s", "256.0 MiB", "71.2 %": a metric's value in its unit ("ns", "bytes", "/s",
// "bytes/s", "GB/s", or any other, shown after the number), for the pages and the comparisons.
std::string format_value(double value, std::string_view unit);
// The width of a table's first column: its longest entry, at least `least`, at most 80, so that
// columns line up for the long names real jobs have
// (`torch/nn/modules/module.py:Module._call_impl`).
size_t name_width(const std::vector<std::string_view>& names, size_t least);

}  // namespace eacgm
