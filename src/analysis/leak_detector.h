// Device-memory leaks: outstanding bytes of one process growing without
// bound. A training loop allocates and frees every step, so its memory
// returns to a floor; a leak is a floor that keeps rising. The GMM sees
// points, not trends: this is one of the targeted detectors of issue 7.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <vector>

#include "session/session.h"

namespace eacgm {

class LeakDetector {
 public:
  struct Options {
    size_t max_points = 4096;            // floors kept per process; they merge pairwise beyond
    int segments = 10;                   // the run is judged in this many equal parts
    uint64_t min_events = 20;            // allocations and frees seen before judging
    double min_rising_share = 0.7;       // of consecutive segments whose floor rose
    int64_t min_growth_bytes = 1 << 20;  // and at least this much growth...
    double min_growth_of_peak = 0.05;    // ...and this share of the peak
    // Besides the whole history, its most recent this many seconds, twice
    // as many, and so on are judged too: a leak that begins after an hour of
    // healthy training is plain in the last few seconds long before it spans
    // 70 % of the hour.
    double min_window_s = 3.0;
  };

  explicit LeakDetector(Options options) : options_(options) {}
  LeakDetector() : LeakDetector(Options{}) {}

  // The outstanding device bytes of `pid` after an allocation or free at `t_ns`.
  void on_memory(uint32_t pid, uint64_t t_ns, int64_t outstanding_bytes);
  // Leaks that are clear by now; each process is reported once.
  std::vector<Anomaly> check(uint64_t session_start_ns);
  // Drops what is known of a process that is gone (a long-running agent
  // must not keep the history of every process it ever saw).
  void forget(uint32_t pid) {
    history_.erase(pid);
    reported_.erase(pid);
  }

 private:
  using Floors = std::vector<std::pair<uint64_t, int64_t>>;
  struct History {
    // (start of a time bucket, min outstanding in it), oldest first;
    // buckets start at 1 ms and double in width whenever there are too
    // many, so memory stays bounded however long the job runs.
    Floors floors;
    uint64_t bucket_ns = 1'000'000;
    // The same over the last kRecentPoints buckets of kRecentBucketNs (at
    // most twice as many are kept): fine enough for the short windows
    // however coarse `floors` has grown.
    Floors recent;
    uint64_t events = 0;
    uint64_t last_ns = 0;
    int64_t peak = 0;
    int64_t last = 0;
  };
  static constexpr uint64_t kRecentBucketNs = 10'000'000;
  static constexpr size_t kRecentPoints = 2048;
  // The test on `points` (h.floors or h.recent) from `from_ns` on; nullopt
  // if they are no leak.
  std::optional<Anomaly> judge(uint32_t pid, const History& h, const Floors& points,
                               uint64_t from_ns, uint64_t session_start_ns) const;

  Options options_;
  std::map<uint32_t, History> history_;
  std::set<uint32_t> reported_;
};

}  // namespace eacgm
