// Device-memory leaks: outstanding bytes of one process growing without
// bound. A training loop allocates and frees every step, so its memory
// returns to a floor; a leak is a floor that keeps rising. The GMM sees
// points, not trends: this is one of the targeted detectors of issue 7.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <vector>

#include "session/session.h"

namespace eacgm {

class LeakDetector {
 public:
  struct Options {
    size_t max_points = 4096;            // floors kept per process; older ones merge pairwise
    int segments = 10;                   // the run is judged in this many equal parts
    uint64_t min_events = 20;            // allocations and frees seen before judging
    double min_rising_share = 0.7;       // of consecutive segments whose floor rose
    int64_t min_growth_bytes = 1 << 20;  // and at least this much growth...
    double min_growth_of_peak = 0.05;    // ...and this share of the peak
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
  struct History {
    // (start of a time bucket, min outstanding in it); buckets start at 1 ms
    // and double in width whenever there are too many, so memory stays
    // bounded however long the job runs.
    std::vector<std::pair<uint64_t, int64_t>> floors;
    uint64_t bucket_ns = 1'000'000;
    uint64_t events = 0;
    uint64_t last_ns = 0;
    int64_t peak = 0;
    int64_t last = 0;
  };
  Options options_;
  std::map<uint32_t, History> history_;
  std::set<uint32_t> reported_;
};

}  // namespace eacgm
