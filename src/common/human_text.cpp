#include "common/human_text.h"

#include <fmt/format.h>

#include <algorithm>

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

size_t name_width(const std::vector<std::string_view>& names, size_t least) {
  size_t width = least;
  for (std::string_view n : names) width = std::max(width, n.size());
  return std::min<size_t>(width, 80);
}

}  // namespace eacgm
