// The os layer's analysis: folds signals, OOM kills, memory mappings, device
// ioctls and mapped libraries of traced processes into the session's
// OsActivity, says in a sentence why a process ended, and reports what is
// anomalous (a MAP_POPULATE storm, a slow driver call, two builds of one
// library in one process) while the job still runs. Pure: no kernel, no I/O.
//
// `record` keeps everything for summary.json and SQLite (the lists are capped
// by the options below); `eacgm serve`, which runs for days, releases each
// process with forget_process() once it has exited and sets smaller caps.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "probes/library_identity.h"
#include "session/session.h"

namespace eacgm {

// When MAP_POPULATE mappings of one process become a storm.
//
// mmap(MAP_POPULATE) faults in every page of the mapping before returning; a
// stream of them (seed 000: ~12/s normally, ~217/s after a framework upgrade)
// keeps the kernel allocating and zeroing memory faster than the job uses
// it, until the memory cgroup's OOM killer ends the job. Normal processes
// make almost none: Python 3.11 importing its standard library and a
// simulated training job make 0 (measured with strace).
//
// Rates are counted in a sliding window (one second), so a storm is seen
// from the job's first second on, with no baseline needed, by an absolute
// threshold; a process with a history is also held against its own normal:
// a window far above its mean rate so far is a storm even below the
// absolute threshold. Either way the window's events must span at least
// `min_span_fraction` of it: a sustained rate, not a one-off batch mapped
// at start-up.
class MmapStormDetector {
 public:
  struct Options {
    uint64_t window_ns = 1'000'000'000;
    uint64_t absolute_per_window = 200;         // "in the hundreds per second"
    double relative_factor = 10.0;              // times the process's own mean rate...
    uint64_t relative_min_per_window = 100;     // ...and at least this many
    uint64_t baseline_min_ns = 10'000'000'000;  // history needed for a mean rate
    double min_span_fraction = 0.5;
  };
  struct Storm {
    uint64_t count = 0;  // populate mappings in the window
    uint64_t bytes = 0;  // their bytes
    uint64_t window_start_ns = 0;
    uint64_t ts_ns = 0;                    // the event that made it a storm
    double rate_per_s = 0;                 // count / window
    std::optional<double> baseline_per_s;  // the process's mean rate before the window
    uint64_t threshold = 0;                // the count the window had to reach
    std::string rule;                      // "absolute" or "relative"
  };

  MmapStormDetector() : MmapStormDetector(Options{}) {}
  explicit MmapStormDetector(Options options) : options_(options) {}

  // Where the process's history starts (its start, or when tracing began).
  void set_origin(uint64_t ns) { origin_ns_ = ns; }
  // One populate mapping. Returns the storm the first time the rate becomes one.
  std::optional<Storm> add(uint64_t ts_ns, uint64_t bytes);
  uint64_t peak_count() const { return peak_count_; }
  uint64_t peak_at_ns() const { return peak_at_ns_; }
  const Options& options() const { return options_; }

 private:
  Options options_;
  std::optional<uint64_t> origin_ns_;
  std::deque<std::pair<uint64_t, uint64_t>> window_;  // (ts, bytes), oldest first
  uint64_t window_bytes_ = 0;
  uint64_t before_window_ = 0;  // populate mappings older than the window
  uint64_t peak_count_ = 0;
  uint64_t peak_at_ns_ = 0;
  bool reported_ = false;
};

// Why a process ended, as a sentence, from its wait status and what the os
// layer saw: the signal that ended it (if one was generated while traced)
// and an OOM kill (if the OOM killer chose it). Fills cause and sender.
ProcessExit explain_exit(ProcessExit exit, const SignalEvent* signal, const OomKillEvent* oom);

class OsMonitor {
 public:
  struct Options {
    uint64_t slow_ioctl_ns = 50'000'000;         // seed 000: driver calls over 50 ms
    uint64_t large_mapping_bytes = 64ull << 20;  // anonymous mappings tracked to the end
    MmapStormDetector::Options storm;
    uint32_t self_pid = 0;       // eacgm itself: its SIGCONTs resume loader stops
    size_t max_signals = 10000;  // kept in the session; counted beyond
    size_t max_slow_ioctls = 100;
    uint64_t hold_ns = 10'000'000'000;  // a slow ioctl's wait for a traced call around it
    // Kept in the session; counted beyond. Each one ends a process, so
    // `record` never sees many; an agent that runs for days may.
    size_t max_oom_kills = 10000;
  };

  OsMonitor() : OsMonitor(Options{}) {}
  explicit OsMonitor(Options options);

  void set_session_start(uint64_t ns) { session_start_ns_ = ns; }
  // What is known of a process: its name for messages, and where its
  // history starts (its fork or exec, or when tracing began; 0: unknown).
  void on_process(uint32_t pid, const std::string& comm, uint64_t start_ns);
  // Its mappings went with it: the large ones still mapped are marked so.
  void on_process_exit(uint32_t pid);
  // Releases everything kept about a process that has exited, its entries in
  // the session's lists included (`eacgm serve`; explain() its exit first).
  void forget_process(uint32_t pid);

  // Returns false for signals that are eacgm's own doing (the loader stop's
  // SIGSTOP, the SIGCONT that ends it, and the SIGCHLDs that tell the
  // paused process's parent it stopped and continued): not the job's business.
  bool on_signal(const SignalEvent& event);
  void on_oom_kill(const OomKillEvent& event);
  void on_mmap(const MmapEvent& event);
  void on_ioctl(const IoctlEvent& event);
  // A traced call (any layer) of thread `tid` ran over [start_ns, end_ns]. A slow ioctl made
  // inside one is that call's slowness, judged by the detectors that judge the call (a GPU's
  // set-up at its first use takes 100s of ms in driver ioctls, by design): counted, not reported.
  // So a slow ioctl is held until `hold_ns` after it ended, for the call around it to return.
  void on_traced_call(uint32_t pid, uint32_t tid, uint64_t start_ns, uint64_t end_ns);
  // The ML/GPU libraries `pid` has mapped at `ts_ns` (all of them, each rescan).
  void on_libraries(uint32_t pid, const std::vector<LibraryBuild>& libraries, uint64_t ts_ns);
  // The device paths that match the ioctl pattern, by kernel dev_t.
  void set_devices(std::string pattern, std::map<uint32_t, std::string> devices);

  // The exit of `pid`, explained with what was seen of its signals and OOM kill.
  ProcessExit explain(uint32_t pid, ProcessExit exit) const;
  // Anomalies found since the last call; slow ioctls held until `now_ns` (all of them without).
  static constexpr uint64_t kReleaseAll = UINT64_MAX;
  std::vector<Anomaly> take_anomalies(uint64_t now_ns = kReleaseAll);
  // The session's record, and the summary.json figures of layers.os.
  const OsActivity& activity() const { return activity_; }
  nlohmann::json figures() const;
  uint64_t events() const { return events_; }

  // What is kept, for tests of the bounds.
  struct Footprint {
    size_t processes = 0;  // pids with any state
    size_t signals = 0;    // entries of the session's lists
    size_t oom_kills = 0;
    size_t slow_ioctls = 0;
  };
  Footprint footprint() const;

 private:
  double seconds(uint64_t ns) const;
  std::string who(uint32_t pid) const;
  void report_slow_ioctl(const IoctlEvent& event);

  Options options_;
  uint64_t session_start_ns_ = 0;
  uint64_t events_ = 0;
  uint64_t signals_dropped_ = 0;    // beyond max_signals
  uint64_t oom_kills_dropped_ = 0;  // beyond max_oom_kills
  OsActivity activity_;
  std::map<uint32_t, uint64_t> process_start_;
  std::map<uint32_t, std::string> comms_;  // for messages
  std::map<uint32_t, MmapStormDetector> storms_;
  std::map<uint32_t, std::map<int, SignalEvent>> signal_by_number_;  // pid -> sig -> last
  std::set<uint32_t> stopped_by_eacgm_;  // pids paused at a loader stop, until they exit
  std::map<uint32_t, OomKillEvent> oom_by_pid_;
  std::map<uint32_t, std::map<std::string, LibraryBuild>> libraries_;  // pid -> family -> first
  std::set<std::pair<uint32_t, std::string>> conflicts_reported_;
  std::set<std::pair<uint32_t, uint32_t>> slow_reported_;  // (pid, rdev)
  std::vector<IoctlEvent> held_;                           // slow, not yet judged
  uint64_t slow_in_traced_calls_ = 0;
  std::vector<Anomaly> pending_;
};

}  // namespace eacgm
