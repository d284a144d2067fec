// Exact percentiles of recorded durations, for every figure that reports p50/p99.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace eacgm {

// Nearest-rank percentile (p in [0, 100]) of `values`, taken by value: nth_element on a copy is
// exact, and cheap next to the cost of having traced the calls in the first place. 0 when empty.
inline uint64_t nearest_rank_percentile(std::vector<uint64_t> values, double p) {
  if (values.empty()) return 0;
  const size_t rank = static_cast<size_t>(std::ceil(p / 100.0 * values.size()));
  const size_t index = std::clamp<size_t>(rank, 1, values.size()) - 1;
  std::nth_element(values.begin(), values.begin() + index, values.end());
  return values[index];
}

}  // namespace eacgm
