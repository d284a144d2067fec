#include "common/human_text.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace eacgm {

std::string human_bytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024 && u < 4) {
    bytes /= 1024;
    ++u;
  }
  return u == 0 ? fmt::format("{:.0f} B", bytes) : fmt::format("{:.1f} {}", bytes, units[u]);
}

std::string human_ns(double ns) {
  if (ns < 1e3) return fmt::format("{:.0f} ns", ns);
  if (ns < 1e6) return fmt::format("{:.1f} us", ns / 1e3);
  if (ns < 1e9) return fmt::format("{:.2f} ms", ns / 1e6);
  return fmt::format("{:.2f} s", ns / 1e9);
}

std::string format_value(double value, std::string_view unit) {
  if (unit == "ns") {
    const double a = std::fabs(value);
    if (a >= 1e9) return fmt::format("{:.2f} s", value / 1e9);
    if (a >= 1e6) return fmt::format("{:.2f} ms", value / 1e6);
    if (a >= 1e3) return fmt::format("{:.2f} us", value / 1e3);
    return fmt::format("{:.0f} ns", value);
  }
  if (unit == "bytes") {
    const double a = std::fabs(value);
    if (a >= 1024.0 * 1024 * 1024) return fmt::format("{:.2f} GiB", value / (1024.0 * 1024 * 1024));
    if (a >= 1024.0 * 1024) return fmt::format("{:.1f} MiB", value / (1024.0 * 1024));
    if (a >= 1024.0) return fmt::format("{:.1f} KiB", value / 1024.0);
    return fmt::format("{:.0f} B", value);
  }
  if (unit == "/s") return fmt::format("{:.2f}/s", value);
  if (unit == "bytes/s") return format_value(value, "bytes") + "/s";
  if (unit == "GB/s") return fmt::format("{:.2f} GB/s", value);
  return fmt::format("{:.1f} {}", value, unit);
}

size_t name_width(const std::vector<std::string_view>& names, size_t least) {
  size_t width = least;
  for (std::string_view n : names) width = std::max(width, n.size());
  return std::min<size_t>(width, 80);
}

}  // namespace eacgm
