#include "analysis/leak_detector.h"

#include <fmt/format.h>

#include <algorithm>

namespace eacgm {

void LeakDetector::on_memory(uint32_t pid, uint64_t t_ns, int64_t outstanding_bytes) {
  History& h = history_[pid];
  const uint64_t bucket = t_ns - t_ns % h.bucket_ns;
  if (h.floors.empty() || h.floors.back().first != bucket) {
    h.floors.emplace_back(bucket, outstanding_bytes);
  } else {
    h.floors.back().second = std::min(h.floors.back().second, outstanding_bytes);
  }
  if (h.floors.size() > options_.max_points) {
    h.bucket_ns *= 2;
    std::vector<std::pair<uint64_t, int64_t>> merged;
    for (const auto& [start, floor] : h.floors) {
      const uint64_t b = start - start % h.bucket_ns;
      if (!merged.empty() && merged.back().first == b) {
        merged.back().second = std::min(merged.back().second, floor);
      } else {
        merged.emplace_back(b, floor);
      }
    }
    h.floors = std::move(merged);
  }
  ++h.events;
  h.last_ns = t_ns;
  h.peak = std::max(h.peak, outstanding_bytes);
  h.last = outstanding_bytes;
}

std::vector<Anomaly> LeakDetector::check(uint64_t session_start_ns) {
  std::vector<Anomaly> found;
  for (const auto& [pid, h] : history_) {
    if (reported_.contains(pid) || h.events < options_.min_events || h.floors.size() < 2) continue;
    const uint64_t first = h.floors.front().first, last = h.floors.back().first;
    // The floor of each of `segments` equal parts of the history.
    const int n = options_.segments;
    std::vector<std::optional<int64_t>> floors(n);
    for (const auto& [bucket, value] : h.floors) {
      const auto seg = static_cast<size_t>((bucket - first) * n / (last - first + 1));
      floors[seg] = floors[seg] ? std::min(*floors[seg], value) : value;
    }
    std::vector<int64_t> f;
    for (const auto& v : floors) {
      if (v) f.push_back(*v);
    }
    // A job that ends frees its working set: trailing segments that fall are
    // its teardown (which may span several segments on a busy machine), not
    // evidence against a leak before it.
    while (f.size() >= 2 && f.back() < f[f.size() - 2]) f.pop_back();
    if (f.size() < 5) continue;
    int rises = 0, falls = 0;
    for (size_t i = 1; i < f.size(); ++i) {
      rises += f[i] > f[i - 1];
      falls += f[i] < f[i - 1];
    }
    const int64_t growth = f.back() - f.front();
    const bool leaking = rises >= options_.min_rising_share * static_cast<double>(f.size() - 1) &&
                         falls <= 1 && growth >= options_.min_growth_bytes &&
                         growth >= options_.min_growth_of_peak * static_cast<double>(h.peak);
    if (!leaking) continue;
    const double seconds = static_cast<double>(std::max<uint64_t>(h.last_ns - first, 1)) / 1e9;
    Anomaly a;
    a.kind = "leak";
    a.layer = Layer::kCuda;
    a.pid = pid;
    a.t_s = first > session_start_ns ? (first - session_start_ns) / 1e9 : 0.0;
    a.score = -static_cast<double>(rises);
    a.evidence = {{"floor_growth_bytes", growth}, {"growth_bytes_per_s", growth / seconds},
                  {"segment_floors_bytes", f},    {"rising_segments", rises},
                  {"outstanding_bytes", h.last},  {"peak_bytes", h.peak},
                  {"window_s", seconds}};
    a.message = fmt::format(
        "pid {}: device memory that is never freed grows by {:.1f} MiB/s ({:.1f} MiB over {:.1f} "
        "s; "
        "its floor rose in {} of {} intervals)",
        pid, growth / seconds / 1048576.0, growth / 1048576.0, seconds, rises, f.size() - 1);
    a.suggestion =
        "compare the cudaMalloc and cudaFree call sites: the allocations still outstanding are in "
        "events.sqlite (cudaMalloc rows whose devPtr no cudaFree released); look for tensors kept "
        "alive across steps (a growing list, a loss kept with its graph)";
    reported_.insert(pid);
    found.push_back(std::move(a));
  }
  return found;
}

}  // namespace eacgm
