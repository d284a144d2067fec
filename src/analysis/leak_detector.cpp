#include "analysis/leak_detector.h"

#include <fmt/format.h>

#include <algorithm>

namespace eacgm {

namespace {

// Adds a reading to a history of (bucket start, floor) points.
void add_floor(std::vector<std::pair<uint64_t, int64_t>>& floors, uint64_t bucket, int64_t bytes) {
  if (floors.empty() || floors.back().first < bucket) {
    floors.emplace_back(bucket, bytes);
  } else {  // the same bucket (or a reading from another CPU a moment older)
    floors.back().second = std::min(floors.back().second, bytes);
  }
}

}  // namespace

void LeakDetector::on_memory(uint32_t pid, uint64_t t_ns, int64_t outstanding_bytes) {
  History& h = history_[pid];
  add_floor(h.floors, t_ns - t_ns % h.bucket_ns, outstanding_bytes);
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
  add_floor(h.recent, t_ns - t_ns % kRecentBucketNs, outstanding_bytes);
  if (h.recent.size() > 2 * kRecentPoints) {  // drop the oldest half at once: amortised O(1)
    h.recent.erase(h.recent.begin(), h.recent.end() - kRecentPoints);
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
    // The recent windows, shortest first, then the whole history. Short
    // windows are judged on the fine recent points as long as those reach
    // back far enough, longer ones on the whole history's coarser buckets.
    const uint64_t first = h.floors.front().first, last = h.floors.back().first;
    std::optional<Anomaly> leak;
    for (double w = options_.min_window_s; w > 0 && !leak; w *= 2) {
      const auto span = static_cast<uint64_t>(w * 1e9);
      if (span >= last - first) break;
      const bool fine = h.recent.front().first <= h.last_ns - span;
      leak = judge(pid, h, fine ? h.recent : h.floors, h.last_ns - span, session_start_ns);
    }
    if (!leak) leak = judge(pid, h, h.floors, first, session_start_ns);
    if (!leak) continue;
    reported_.insert(pid);
    found.push_back(std::move(*leak));
  }
  return found;
}

std::optional<Anomaly> LeakDetector::judge(uint32_t pid, const History& h, const Floors& points,
                                           uint64_t from_ns, uint64_t session_start_ns) const {
  const auto begin = std::ranges::lower_bound(
      points, from_ns, {}, [](const std::pair<uint64_t, int64_t>& f) { return f.first; });
  // Too few points to split into segments: the window is shorter than the
  // buckets a long history has merged into.
  const int n = options_.segments;
  if (points.end() - begin < 2 * n) return std::nullopt;
  const uint64_t first = begin->first, last = points.back().first;
  // The floor of each of `segments` equal parts of the window.
  std::vector<std::optional<int64_t>> floors(n);
  for (auto it = begin; it != points.end(); ++it) {
    const auto seg = static_cast<size_t>((it->first - first) * n / (last - first + 1));
    floors[seg] = floors[seg] ? std::min(*floors[seg], it->second) : it->second;
  }
  std::vector<int64_t> f;
  std::vector<uint64_t> f_start;  // where each kept segment begins
  for (int i = 0; i < n; ++i) {
    if (!floors[i]) continue;
    f.push_back(*floors[i]);
    f_start.push_back(first + (last - first + 1) * static_cast<uint64_t>(i) / n);
  }
  // A job that ends frees its working set: trailing segments that fall are
  // its teardown (which may span several segments on a busy machine), not
  // evidence against a leak before it.
  while (f.size() >= 2 && f.back() < f[f.size() - 2]) f.pop_back();
  if (f.size() < 5) return std::nullopt;
  int rises = 0, falls = 0;
  size_t first_rise = 0;
  for (size_t i = 1; i < f.size(); ++i) {
    if (f[i] > f[i - 1] && rises++ == 0) first_rise = i;
    falls += f[i] < f[i - 1];
  }
  const int64_t growth = f.back() - f.front();
  const bool leaking = rises >= options_.min_rising_share * static_cast<double>(f.size() - 1) &&
                       falls <= 1 && growth >= options_.min_growth_bytes &&
                       growth >= options_.min_growth_of_peak * static_cast<double>(h.peak);
  if (!leaking) return std::nullopt;
  // Since when: the segment before the first rise, the last one at the old floor.
  const uint64_t onset = f_start[first_rise - 1];
  const double seconds = static_cast<double>(std::max<uint64_t>(h.last_ns - onset, 1)) / 1e9;
  Anomaly a;
  a.kind = "leak";
  a.layer = Layer::kCuda;
  a.pid = pid;
  a.t_s = onset > session_start_ns ? (onset - session_start_ns) / 1e9 : 0.0;
  a.score = -static_cast<double>(rises);
  a.evidence = {{"floor_growth_bytes", growth}, {"growth_bytes_per_s", growth / seconds},
                {"segment_floors_bytes", f},    {"rising_segments", rises},
                {"outstanding_bytes", h.last},  {"peak_bytes", h.peak},
                {"window_s", seconds}};
  // A fast leak in a short job grows over milliseconds: "over 0.0 s" would say nothing.
  const std::string over =
      seconds < 1 ? fmt::format("{:.0f} ms", seconds * 1e3) : fmt::format("{:.1f} s", seconds);
  a.message = fmt::format(
      "pid {}: device memory that is never freed grows by {:.1f} MiB/s ({:.1f} MiB over {}; "
      "its floor rose in {} of {} intervals)",
      pid, growth / seconds / 1048576.0, growth / 1048576.0, over, rises, f.size() - 1);
  a.suggestion =
      "compare the cudaMalloc and cudaFree call sites: the allocations still outstanding are in "
      "events.sqlite (cudaMalloc rows whose devPtr no cudaFree released); look for tensors kept "
      "alive across steps (a growing list, a loss kept with its graph)";
  return a;
}

}  // namespace eacgm
