// One recorded session measured for `eacgm compare`: every metric it can be compared on, each as
// per-window values (the session cut into windows of equal length), for whole-run events
// (MAP_POPULATE mappings, signals, anomalies) a count over the run's duration, or, for figures the
// session keeps only for the whole run (sampled Python time, device memory at the end, ioctl
// latency), one value per run.
#pragma once

#include <compare>
#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "analysis/session_db.h"
#include "common/result.h"

namespace eacgm::compare {

// What is matched across runs: the process (by role: `rank:1`, `worker:rank:0`, `comm:python`;
// `gpu:0` for a device; `job` for the whole job), the layer (`cuda` ... `os`, `memory`, `gpu`,
// `anomaly`), the thing (API, operator, kernel, Python function, reading, kind) and the metric.
struct MetricKey {
  std::string process;
  std::string layer;
  std::string what;
  std::string metric;
  auto operator<=>(const MetricKey&) const = default;
};

// How a metric is sampled:
// - kWindows: one value per window of each run (RunValues::windows), compared with the rank test;
// - kEvents: a count per run (RunValues::count), compared as a rate with the Poisson test;
// - kRuns: one value per run (RunValues::windows holds it alone), compared with the rank test
//   over the runs: a run is one sample, so only several runs a side can show a change;
// - kOutcomes: one yes (100) or no (0) per run, stored as kRuns is, compared with Fisher's exact
//   test: the share of runs with that outcome.
enum class Sampling { kWindows, kEvents, kRuns, kOutcomes };
// Which time metrics must also be worth a look (compare.h's Thresholds say how much):
// - kCallTime: an API's, operator's or kernel's latency, self time or launch latency. Between two
//   runs a busier machine moves every latency; an API that costs the job almost nothing can move
//   20 % that way, consistently across the windows of a run, and so pass the rank test. A change
//   that costs that little is not worth a rollout's attention either.
// - kLateness: collective lateness, where one rank turning late makes the ranks that wait for it
//   read as "less late" by a few microseconds of jitter, which is no change of theirs.
enum class CostFloor { kNone, kCallTime, kLateness };
struct MetricInfo {
  std::string_view unit;  // "ns", "/s", "bytes", "%", "W", "C", "MHz", "GB/s", "bytes/s"
  bool higher_is_worse = true;
  Sampling sampling = Sampling::kWindows;
  // Latency-like metrics need calls on both sides; a rate is judged when either side has them.
  bool needs_both = true;
  // Which floor of what the change costs (or saves) of the job's time it must reach to count
  // (Thresholds::min_cost, min_call_time_cost); kNone: changes that are not time.
  CostFloor cost_floor = CostFloor::kNone;
};
MetricInfo metric_info(std::string_view metric);

// The names of the metrics (MetricKey::metric).
inline constexpr std::string_view kLatency = "latency";
// An API's share of its process's calls, per window: how often it is called relative to
// everything else the process does, so that a job that merely ran faster or slower (a busier
// machine) does not read as every API more or less frequent.
inline constexpr std::string_view kShare = "share of calls";
inline constexpr std::string_view kSelfTime = "self time";
inline constexpr std::string_view kLaunchLatency = "launch latency";
inline constexpr std::string_view kLaunchShare = "launch share";  // of the process's calls
// The pace of a process: all its traced calls per second (layer "all", what "all calls"). Never a
// regression or an improvement on its own (fewer calls a second may be a slower job, or one doing
// less needless work): a change is a note.
inline constexpr std::string_view kPace = "calls/s";
inline constexpr std::string_view kMemoryPeak = "device memory peak";
inline constexpr std::string_view kEventRate = "events/s";
inline constexpr std::string_view kAnomalyRate = "anomalies/s";
// GPU readings (per-window means of the gpu layer's samples).
inline constexpr std::string_view kGpuUtil = "utilization";
inline constexpr std::string_view kGpuMemory = "memory used";
inline constexpr std::string_view kGpuPower = "power";
inline constexpr std::string_view kGpuTemperature = "temperature";
inline constexpr std::string_view kGpuClock = "SM clock";
// NCCL: bytes over the time inside each call (GB/s), per-window medians, per API. Grouped calls
// (between ncclGroupStart and ncclGroupEnd) return before their transfer and are left out.
inline constexpr std::string_view kBandwidth = "bandwidth";
// NCCL (what "all collectives"): a rank's entry into a collective less the earliest entry of any
// rank into it, per-window medians (the window of the earliest entry).
inline constexpr std::string_view kLateness = "collective lateness";
// Per-run values (Sampling::kRuns).
inline constexpr std::string_view kPythonShare = "share of sampled time";  // self time, %
inline constexpr std::string_view kMemoryAtEnd = "device memory at end";
inline constexpr std::string_view kMmapBytesRate = "bytes mapped/s";
inline constexpr std::string_view kIoctlLatency = "mean ioctl latency";
// Per-run outcome (Sampling::kOutcomes): the share of runs whose job ended abnormally.
inline constexpr std::string_view kAbnormalRuns = "runs ended abnormally";

struct RunValues {
  // Sampling::kWindows: one value per window that has one; kRuns and kOutcomes: the run's value.
  std::vector<double> windows;
  uint64_t count = 0;     // the calls (samples, events) behind the metric in this run
  uint64_t total_ns = 0;  // calls: time inside them, for what a change costs
};

// How one run ended, for the notes: its exit code, and the causes of its processes' abnormal ends.
struct RunEnd {
  std::optional<int> exit_code;
  std::vector<std::string> causes;
};
// A job that exited with a status other than 0, or any of whose processes did (or was killed).
bool ended_abnormally(const RunEnd& end);

struct RunData {
  std::string dir;
  double seconds = 0;  // meta start to end
  size_t windows = 0;  // how many windows it was cut into
  // Events lost (summary.json events.dropped and .undecodable): the calls are incomplete.
  uint64_t events_dropped = 0;
  std::map<MetricKey, RunValues> metrics;
  RunEnd end;
};

// One row of gpu_samples: the readings compare looks at, NaN where NVML had none.
struct GpuReading {
  int device = 0;
  uint64_t ts_ns = 0;
  double util_pct = 0, memory_used_bytes = 0, power_w = 0, temperature_c = 0, sm_clock_mhz = 0;
};

// One rank's entry into one NCCL collective (events.sqlite `collectives` joined with `calls`).
struct CollectiveEntry {
  uint32_t pid = 0;
  std::string comm;  // the communicator, the same on every rank
  int rank = 0;
  uint64_t seq = 0;  // the collective's number in its communicator, the same on every rank
  uint64_t start_ns = 0;
};

// How late one rank entered one collective: its entry less the earliest entry of any rank into
// the same collective (the same comm and seq). All ranks of one session share its clock, so
// entries compare directly (the `world` communicator assumed at attach included).
struct CollectiveArrival {
  const CollectiveEntry* entry = nullptr;
  uint64_t earliest_ns = 0;  // the collective's first entry, by any rank
  uint64_t lateness_ns = 0;
  bool last = false;  // the last rank in, when not all entered at once
};
// Every entry of the collectives that two ranks or more entered (one rank alone is late to
// nothing), by communicator and sequence number. The entries must outlive the result.
std::vector<CollectiveArrival> collective_arrivals(const std::vector<CollectiveEntry>& entries);

// One row of python_functions: the sampled time of a Python function over the whole run.
struct PythonFunctionTime {
  std::string function;  // `file.py:qualname`
  uint64_t samples = 0;  // stack samples with it on the stack
  uint64_t self_ns = 0;  // time as the innermost frame, estimated from the samples
};

// A session read back: the calls (session_db) and summary.json (null when the session has none:
// a crashed recorder's). Errors say what is wrong with the directory, in one line.
struct LoadedRun {
  std::unique_ptr<RecordedSession> session;
  nlohmann::json summary;
  std::vector<GpuReading> gpu;  // events.sqlite gpu_samples, empty without the gpu layer
  std::vector<CollectiveEntry> collectives;  // empty without the nccl layer
  std::vector<PythonFunctionTime> python;    // empty without the python layer
};
Result<LoadedRun> load_run(const std::string& dir);
// The same, for a session that may have no traced calls (an os-only recording): for what shows a
// session rather than compares it (eacgm report).
Result<LoadedRun> read_run(const std::string& dir);

double run_seconds(const LoadedRun& run);

// The window every run of a comparison is cut into: a twentieth of the shortest run, between 50 ms
// and 1 s, so that a short run still gives the rank test enough values and a long one many.
uint64_t choose_window_ns(const std::vector<const LoadedRun*>& runs);

// Every metric of `run`, cut into windows of `window_ns` from the session's start (a last window
// shorter than half a window is left out: its rate would be noise).
RunData measure_run(const LoadedRun& run, uint64_t window_ns);

}  // namespace eacgm::compare
