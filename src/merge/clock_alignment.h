// Puts sessions recorded on several nodes on one clock. Each session's times are its own node's
// CLOCK_MONOTONIC; the realtime offset each recorded gives a first guess, as good as the nodes'
// NTP (milliseconds, often worse). The collectives refine it with the one exact fact there is: no
// rank leaves a collective before every rank has entered it, so the calls of one collective
// (matched by communicator and sequence number, which every node counts alike) overlap in time
// on every pair of ranks. Each collective bounds the offset between two sessions from both
// sides; the bounds of all of them meet in an interval. The realtime guess stands when it lies
// inside; otherwise the middle of the interval is taken. The error left is the distance to the
// farther bound.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace eacgm {

struct CollectiveSpan {
  std::string comm;
  uint64_t seq = 0;
  int rank = -1;
  uint64_t start_ns = 0;
  uint64_t end_ns = 0;
};

struct SessionClock {
  int64_t realtime_offset_ns = 0;  // the session's meta.realtime_offset_ns
  std::vector<CollectiveSpan> collectives;
};

struct SessionShift {
  // Add to the session's times to put them on the reference session's clock.
  int64_t shift_ns = 0;
  // "reference", "collectives" (refined), or "realtime" (no collective shared with the sessions
  // aligned before it: the realtime offsets alone).
  std::string method;
  // The most the shift can be wrong by while every shared collective overlaps: the error left.
  std::optional<int64_t> residual_ns;
  size_t collectives_shared = 0;
  // Shared collectives that cannot overlap under the chosen shift (clock drift, a mismatched
  // session); when any, the shift is the median of what each collective alone suggests.
  size_t conflicts = 0;
  int64_t realtime_correction_ns = 0;  // shift_ns minus what the realtime offsets said
};

// One shift per session, `reference` first at 0. Sessions are aligned one at a time, each against
// every session aligned before it, the one sharing the most collectives with them first.
std::vector<SessionShift> align_clocks(const std::vector<SessionClock>& sessions,
                                       size_t reference = 0);

}  // namespace eacgm
