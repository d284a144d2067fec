// Features for anomaly detection on traces (issue 7, seed §3): what the GMM and the targeted
// detectors look at. Two granularities:
//   - per event: the log of a call's duration and of the bytes it moved, keyed by its API;
//   - per window: one second of one process (a worker: a rank, or a pid without one), summarised
//     as a fixed vector (call and launch rates, launch and sync latency, device memory and its
//     slope, NCCL latency and bandwidth, ...) plus the per-API durations the latency detector
//     needs.
// The same code builds windows live (Recorder) and from a recorded session (eacgm analyze), so a
// session analysed offline gives the verdicts the live run gave.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "probes/probe_table.h"

namespace eacgm {

// One finished call, as the analysis needs it (from a CallRecord live, from a calls row offline).
struct CallSample {
  uint32_t pid = 0;
  Layer layer = Layer::kCuda;
  std::string_view name;  // must outlive the aggregator (probe table symbols; interned offline)
  ApiClass api_class = ApiClass::kOther;  // its probe row's (what the window features count)
  uint64_t start_ns = 0;
  uint64_t duration_ns = 0;
  uint64_t bytes = 0;
  bool failed = false;
  // The process's outstanding device bytes after this call (all calls carry it, so each window
  // knows where memory stood at its end).
  int64_t outstanding_bytes = 0;
  bool memory_event = false;  // it allocated or freed device memory (the leak detector's input)

  uint64_t end_ns() const { return start_ns + duration_ns; }
};

// Per-event features: log(1 + duration in ns) and log(1 + bytes). Logs make the heavy-tailed
// latencies roughly Gaussian, which is what the models assume.
inline double log_ns(uint64_t ns) { return std::log1p(static_cast<double>(ns)); }
struct EventFeatures {
  double log_duration = 0;
  double log_bytes = 0;
};
inline EventFeatures event_features(const CallSample& c) {
  return {log_ns(c.duration_ns), std::log1p(static_cast<double>(c.bytes))};
}

// What a window feature, a statistic of nothing or a missing reading is: NaN (see below).
inline constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// The window features, in vector order. A feature that a window cannot have (no launch in it, no
// NCCL at all) is NaN: the scaler imputes it as "typical", so absence alone is never an anomaly
// (an absent *rate* is 0, not NaN: no calls at all is exactly what a throughput drop looks like).
enum WindowFeature : int {
  kCallRate = 0,         // traced calls per second
  kLaunchRate,           // kernel (and graph) launches per second
  kLaunchLatency,        // mean log(1 + ns) of launches
  kSyncLatency,          // mean log(1 + ns) of synchronisations
  kBusyShare,            // share of the window spent inside traced calls (can exceed 1: threads)
  kCopyRate,             // MiB per second moved by copies and memsets
  kDeviceMemory,         // floor of the outstanding device MiB in the window (see below)
  kDeviceMemorySlope,    // its change over the window, MiB/s
  kCollectiveLatency,    // mean log(1 + ns) of NCCL collectives
  kCollectiveBandwidth,  // GB/s: bytes of collectives over time inside them
  kErrorRate,            // failed calls per second
  kWindowFeatureCount
};
// Names as they appear in models and anomalies ("call_rate", ...).
std::span<const std::string_view> window_feature_names();
std::optional<int> window_feature_index(std::string_view name);
// Which way a feature moves when a job gets worse: +1 up (latencies, memory, errors), -1 down
// (rates, bandwidth), 0 either (busy_share: slower calls raise it, a host stall lowers it).
int worse_direction(int feature);
// The smallest spread a feature's scale may have, so that a feature that happened to be constant
// in training (memory between steps) does not turn the least change into a huge deviation.
double feature_min_scale(int feature, double typical_value);

// Durations of one API in one window.
struct ApiWindow {
  Layer layer = Layer::kCuda;  // the API's layer
  std::vector<double> log_durations;
  double median_log_duration() const;  // NaN when empty
};

struct Window {
  uint32_t pid = 0;
  int64_t index = 0;      // 0 is the process's first second (its setup): never scored
  uint64_t start_ns = 0;  // [start_ns, start_ns + width)
  uint64_t end_ns = 0;
  std::vector<double> features;  // kWindowFeatureCount values
  std::map<std::string_view, ApiWindow> apis;
};

// Cuts each process's calls into consecutive windows of `width_ns`, aligned on its first call. A
// window is emitted once it is over (plus `grace_ns` for calls still on their way through the ring
// buffer), including windows without any call while the process lives; a window the process did
// not live through (it exited, or the session ended, inside it) is dropped: a partial window would
// look like a throughput drop.
class WindowAggregator {
 public:
  explicit WindowAggregator(uint64_t width_ns = 1'000'000'000, uint64_t grace_ns = 300'000'000)
      : width_ns_(width_ns), grace_ns_(grace_ns) {}

  // Calls must come roughly in order of their end (as the ring buffer delivers them); a call that
  // ends in a window already emitted is counted in the oldest open one.
  void add(const CallSample& call);
  // The process exited at `end_ns`: its open windows that end later are dropped.
  void end_process(uint32_t pid, uint64_t end_ns);
  void forget(uint32_t pid) {
    open_.erase(pid);
    ends_.erase(pid);
  }
  // Windows complete by `now_ns`, in time order per process.
  std::vector<Window> close(uint64_t now_ns);
  // Every remaining complete window, as if the session ended at `end_ns` (partial ones dropped).
  std::vector<Window> finish(uint64_t end_ns);
  uint64_t width_ns() const { return width_ns_; }

 private:
  struct Open {
    uint64_t origin_ns = 0;
    int64_t index = 0;  // of the window being filled
    // A step allocates and frees its working set, so the level at any instant is a sample of a
    // saw-tooth; its floor (the level between steps) is what stays put in a healthy job and rises
    // with a leak. The slope compares floors of consecutive windows.
    int64_t outstanding = 0;
    int64_t floor = 0;
    int64_t previous_floor = 0;
    uint64_t calls = 0, launches = 0, errors = 0, busy_ns = 0, copy_bytes = 0;
    uint64_t collective_bytes = 0, collective_ns = 0;
    double launch_log_sum = 0, sync_log_sum = 0, collective_log_sum = 0;
    uint64_t syncs = 0, collectives = 0;
    std::map<std::string_view, ApiWindow> apis;
  };
  Window emit(uint32_t pid, Open& open) const;
  void start_next(Open& open) const;

  uint64_t width_ns_;
  uint64_t grace_ns_;
  std::map<uint32_t, Open> open_;
  std::vector<Window> ready_;          // completed, not yet returned by close()
  std::map<uint32_t, uint64_t> ends_;  // processes that exited, and when
};

// Robust statistics used by the detectors and their tests.
double median(std::vector<double> values);  // NaN when empty
double median_absolute_deviation(std::span<const double> values, double center);

}  // namespace eacgm
