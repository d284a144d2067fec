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
// The width of a table's first column: its longest entry, at least `least`, at most 80, so that
// columns line up for the long names real jobs have
// (`torch/nn/modules/module.py:Module._call_impl`).
size_t name_width(const std::vector<std::string_view>& names, size_t least);

}  // namespace eacgm
