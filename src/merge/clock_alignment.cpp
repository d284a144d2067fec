#include "merge/clock_alignment.h"

#include <algorithm>
#include <limits>
#include <map>
#include <utility>

namespace eacgm {
namespace {

using Key = std::pair<std::string, uint64_t>;  // communicator, sequence number

struct Span {
  int64_t start = 0;
  int64_t end = 0;
};

}  // namespace

std::vector<SessionShift> align_clocks(const std::vector<SessionClock>& sessions,
                                       size_t reference) {
  std::vector<SessionShift> out(sessions.size());
  if (sessions.empty()) return out;
  reference = std::min(reference, sessions.size() - 1);
  // Each session's collectives by (communicator, seq), on its own clock.
  std::vector<std::map<Key, std::vector<Span>>> own(sessions.size());
  for (size_t i = 0; i < sessions.size(); ++i) {
    for (const CollectiveSpan& c : sessions[i].collectives) {
      own[i][{c.comm, c.seq}].push_back(
          {static_cast<int64_t>(c.start_ns), static_cast<int64_t>(c.end_ns)});
    }
  }
  // The aligned sessions' collectives, on the reference clock.
  std::map<Key, std::vector<Span>> aligned;
  auto add = [&](size_t i, int64_t shift) {
    for (const auto& [key, spans] : own[i]) {
      for (Span s : spans) aligned[key].push_back({s.start + shift, s.end + shift});
    }
  };
  std::vector<bool> done(sessions.size(), false);
  out[reference] = {.shift_ns = 0, .method = "reference", .residual_ns = 0};
  done[reference] = true;
  add(reference, 0);

  for (size_t round = 1; round < sessions.size(); ++round) {
    // The session sharing the most collectives with those aligned.
    size_t next = sessions.size();
    size_t best = 0;
    for (size_t i = 0; i < sessions.size(); ++i) {
      if (done[i]) continue;
      size_t shared = 0;
      for (const auto& [key, spans] : own[i]) shared += aligned.contains(key);
      if (next == sessions.size() || shared > best) {
        next = i;
        best = shared;
      }
    }
    const int64_t guess =
        sessions[next].realtime_offset_ns - sessions[reference].realtime_offset_ns;
    SessionShift& shift = out[next];
    shift.shift_ns = guess;
    shift.method = "realtime";
    shift.collectives_shared = best;
    if (best > 0) {
      // Overlap of [a.start + d, a.end + d] with [b.start, b.end] for every pair:
      // b.start - a.end <= d <= b.end - a.start.
      int64_t lo = std::numeric_limits<int64_t>::min(), hi = std::numeric_limits<int64_t>::max();
      std::vector<std::pair<int64_t, int64_t>> per_collective;
      for (const auto& [key, spans] : own[next]) {
        auto other = aligned.find(key);
        if (other == aligned.end()) continue;
        int64_t clo = std::numeric_limits<int64_t>::min(),
                chi = std::numeric_limits<int64_t>::max();
        for (Span a : spans) {
          for (Span b : other->second) {
            clo = std::max(clo, b.start - a.end);
            chi = std::min(chi, b.end - a.start);
          }
        }
        per_collective.emplace_back(clo, chi);
        lo = std::max(lo, clo);
        hi = std::min(hi, chi);
      }
      int64_t d = 0;
      if (lo <= hi) {
        // The realtime clocks' word stands where the collectives allow it (NTP is often better
        // than the bounds); where they contradict it, it is worth nothing, and the middle of the
        // bounds errs least.
        d = lo <= guess && guess <= hi ? guess : lo + (hi - lo) / 2;
        shift.residual_ns = std::max(d - lo, hi - d);
      } else {
        std::vector<int64_t> middles;
        for (auto [clo, chi] : per_collective) middles.push_back(clo + (chi - clo) / 2);
        std::ranges::nth_element(middles, middles.begin() + middles.size() / 2);
        d = middles[middles.size() / 2];
        for (auto [clo, chi] : per_collective) shift.conflicts += d < clo || d > chi;
      }
      shift.shift_ns = d;
      shift.method = "collectives";
    }
    shift.realtime_correction_ns = shift.shift_ns - guess;
    done[next] = true;
    add(next, shift.shift_ns);
  }
  return out;
}

}  // namespace eacgm
