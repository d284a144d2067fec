// The clocks eacgm reads. Events carry CLOCK_MONOTONIC (bpf_ktime_get_ns), so every time the
// agent compares with an event's comes from monotonic_ns(); the realtime offset maps them to
// wall-clock time for people and for other nodes.
#pragma once

#include <cstdint>
#include <ctime>

namespace eacgm {

inline uint64_t clock_ns(clockid_t clock) {
  timespec ts{};
  clock_gettime(clock, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}

inline uint64_t monotonic_ns() { return clock_ns(CLOCK_MONOTONIC); }

// CLOCK_REALTIME minus CLOCK_MONOTONIC, now.
inline int64_t realtime_offset_ns() {
  const uint64_t mono = monotonic_ns();
  return static_cast<int64_t>(clock_ns(CLOCK_REALTIME)) - static_cast<int64_t>(mono);
}

}  // namespace eacgm
