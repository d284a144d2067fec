// Latency episodes in a process the window detectors could not judge (eacgm analyze).
//
// The window detectors learn a process's baseline from its first ten one-second windows, so a job
// shorter than that warm-up is never judged: an episode of 15 stream synchronisations 15x slower
// in a 7-second job goes unreported. Offline the whole run is known, so such a process is judged
// against itself: each API's baseline is the median and the median absolute deviation of its log
// durations over the whole run (robust: a short episode barely moves either), and a stretch of
// consecutive calls of the API far above that median is one episode. Only what the live warm-up
// left unjudged is judged this way, so no episode is reported twice.
#pragma once

#include <cstdint>
#include <set>
#include <vector>

#include "analysis/session_db.h"
#include "session/session.h"

namespace eacgm {

struct WholeRunOptions {
  // A call is slow when it is at least min_ratio times the API's whole-run median and beyond
  // mad_k robust deviations (1.4826 x MAD) of the log durations.
  double min_ratio = 4.0;
  double mad_k = 6.0;
  size_t min_api_calls = 30;  // fewer calls of an API give no baseline
  // An episode is a stretch of slow calls that ends at `gap` consecutive normal ones; it is
  // reported when it holds at least min_slow_calls slow calls...
  size_t min_slow_calls = 8;
  size_t gap = 2;
  // ...and they added at least this much time over the median, and this share of the process's
  // traced lifetime: a few microseconds of jitter on a busy machine are nothing to act on.
  uint64_t min_added_ns = 5'000'000;
  double min_added_share = 0.001;
  // The first second of a process is its setup (first calls initialise the runtime), as for the
  // window detectors.
  uint64_t setup_ns = 1'000'000'000;
};

// The episodes of the processes in `pids`, as "latency" anomalies whose evidence says the
// baseline was the whole run; in time order.
std::vector<Anomaly> whole_run_latency_episodes(const RecordedSession& session,
                                                const std::set<uint32_t>& pids,
                                                const WholeRunOptions& options = {});

}  // namespace eacgm
