// SLO baselines learned from healthy recorded sessions (`eacgm slo fit`), and the gate that holds
// a session against them (`eacgm slo check`). docs/SLO.md says what is fitted and why.
//
// A run is first reduced to Observations: one value per objective key (phase, process role, layer,
// thing, metric), measured by slo/measure.h. Fitting takes the observations of several healthy runs
// and turns every key with enough data in every run into an Objective with a bound and a
// threshold; checking compares one run's observations with the objectives. Both are pure: the
// unit tests build observations by hand.
#pragma once

#include <compare>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace eacgm::slo {

// slo.json's format version: a reader refuses any other (a newer file may mean something else).
inline constexpr int kVersion = 1;

// When in a run a value is taken. The first seconds of a job (loading, allocating, the first
// collectives, compilation) behave unlike its steady state, so each gets its own baseline; counts
// that summary.json keeps for the whole run (MAP_POPULATE mappings, anomalies) have no times and
// are judged over the run.
enum class Phase { kStartup, kSteady, kRun };
std::string_view phase_name(Phase phase);
std::optional<Phase> phase_from_name(std::string_view name);

// Which side of the threshold is a violation.
enum class Bound { kUpper, kLower };
std::string_view bound_name(Bound bound);

// The metrics an SLO can hold (ObjectiveKey::metric).
// Each API's tail latency, `pN latency`: the p90 unless `slo fit --latency-percentile` says
// otherwise (docs/SLO.md says why the p90 is the default). The percentile is part of the name, so
// a file says which tail it holds.
inline constexpr int kDefaultLatencyPercentile = 90;
inline constexpr std::string_view kTailLatency = "p90 latency";
std::string tail_latency_metric(int percentile);
// The percentile of a tail latency metric (`p99 latency` -> 99); nullopt for any other metric.
std::optional<int> tail_latency_percentile(std::string_view metric);
// The percentiles a tail latency may be fitted at.
inline constexpr int kMinLatencyPercentile = 50;
inline constexpr int kMaxLatencyPercentile = 99;
// Calls per second: of every traced call of a process role (layer `all`, what `all calls`), and of
// each API, operator or function of it. A lower bound: a rollout that slows a job down, or stops
// it calling something, loses calls per second.
inline constexpr std::string_view kCallRate = "calls/s";
// Each API's share of its process role's calls, in percent: the upper bound that holds a storm of
// one API (ten times the cudaMalloc calls, the seed's MAP_POPULATE storm). Not an upper bound on
// the rate: a job that merely runs faster raises every API's rate, and never its share.
inline constexpr std::string_view kCallShare = "share of calls";
// A torch operator's self time (its own time less that of the traced calls nested in it), as
// compare measures it: the median of each window's calls.
inline constexpr std::string_view kSelfTime = "self time";
inline constexpr std::string_view kDeviceMemory = "device memory peak";
inline constexpr std::string_view kGpuUtilization = "utilization";
inline constexpr std::string_view kGpuMemory = "memory used";
inline constexpr std::string_view kEventRate = "events/s";
inline constexpr std::string_view kAnomalyRate = "anomalies/s";
// NCCL: each rank's lateness into the collectives (compare's, per-window medians) and each
// collective API's bandwidth (bytes over the time inside the call, per-window medians).
inline constexpr std::string_view kCollectiveLateness = "collective lateness";
inline constexpr std::string_view kNcclBandwidth = "bandwidth";

// How each metric is read and judged: unit, bound, the statistic taken from a run, and the
// tolerance of the margin (fraction of the worst healthy value) unless `--tolerance` says
// otherwise.
struct MetricRule {
  std::string_view unit;
  Bound bound = Bound::kUpper;
  std::string statistic;
  double tolerance = 0.25;
};
// nullopt for a metric this version does not know (a newer slo.json).
std::optional<MetricRule> metric_rule(std::string_view metric);

struct ObjectiveKey {
  Phase phase = Phase::kSteady;
  std::string process;  // a process role (`rank:0`, `comm:python`), or `job`
  std::string layer;    // cuda ... os, `memory`, `gpu`, `all`; an anomaly's layer
  std::string what;     // the API, `device memory`, `device 0`, `all calls`, an anomaly kind
  std::string metric;
  auto operator<=>(const ObjectiveKey&) const = default;
};
// A stable, readable name: `steady/p90_latency/cuda/cudaLaunchKernel/rank:0`.
std::string objective_id(const ObjectiveKey& key);

// One run's value for a key: the statistic (MetricRule::statistic) and what it rests on.
struct Observation {
  double value = 0;
  uint64_t count = 0;  // the calls, samples or events behind it
  size_t windows = 0;  // the windows it was taken over (0 for a whole-run count)
};

// One session reduced to its observations.
struct Observed {
  std::string dir;
  double seconds = 0;  // the run's length
  std::map<ObjectiveKey, Observation> values;
  std::vector<std::string> notes;  // lost events, a failed job: things the reader should know
};

// How the runs are cut, and which tail of each API's latency is taken; written to slo.json so that
// `check` measures a session the same way.
struct Windows {
  double startup_s = 0;         // the start-up phase: the first startup_s seconds
  double startup_window_s = 0;  // its windows
  double steady_window_s = 0;   // the steady state's windows
  int latency_percentile = kDefaultLatencyPercentile;
};

struct FitOptions {
  Windows windows;
  std::optional<double> tolerance;  // overrides every metric's own
  // Per run and phase, for what rests on one API's calls: a tail latency, a self time, an API's
  // call rate and its share of calls.
  uint64_t min_calls = 100;
  size_t min_windows = 3;    // per run and phase, for a windowed statistic
  uint64_t min_events = 10;  // an event rate's floor: this many over the shortest run
  // A lateness threshold's floor. Healthy ranks are late by scheduling jitter (microseconds) that
  // moves with the machine's load; below a millisecond no rank is waited for in a way that costs
  // a job (the straggler detector's own floor, CollectiveTracker::Options).
  double min_lateness_ns = 1e6;
  // A self time threshold's floor. An operator's self time holds the probe traps of the traced
  // calls nested in it (their entry and return, 1 to 3.4 us a hit on these hosts, DESIGN.md),
  // which its children's own times count only in part: a wrapper such as aten::nll_loss has 3 us of
  // self time that is mostly the tracer's, and that moved by up to 1.9 times between runs of one
  // job on a busy host. Below 20 us a self time says more about the host than about the operator.
  double min_self_time_ns = 20e3;
};

struct Objective {
  ObjectiveKey key;
  std::string unit;
  Bound bound = Bound::kUpper;
  double threshold = 0;
  std::string statistic;
  double tolerance = 0;
  // The evidence: each healthy run's value and the calls behind it.
  std::vector<std::string> runs;
  std::vector<double> values;
  std::vector<uint64_t> counts;
  std::string rule;  // how the threshold came from the values, in words with the numbers
};

struct Skipped {
  ObjectiveKey key;
  std::string reason;
};

struct Slo {
  int version = kVersion;
  std::vector<std::string> runs;  // the healthy sessions it was fitted from
  Windows windows;
  FitOptions options;
  std::vector<Objective> objectives;
  std::vector<Skipped> skipped;
};

// Fits the objectives every run supports. The threshold of each key is its worst healthy value
// (the highest for an upper bound, the lowest for a lower one) moved away by a margin: the larger
// of the tolerance times that value and the spread (highest minus lowest) of the healthy values.
// Keys with too little data in some run, or missing from some, are listed in `skipped` with why.
Slo fit(const std::vector<Observed>& runs, const FitOptions& options);

// One objective held against one session.
struct Verdict {
  const Objective* objective = nullptr;
  enum class State { kHeld, kViolated, kNotJudged } state = State::kHeld;
  std::optional<Observation> observed;
  std::string reason;  // for kNotJudged: why (too few calls, not seen)
};
struct SessionVerdicts {
  std::string dir;
  std::vector<Verdict> verdicts;  // violated first, by how far past their threshold
  std::vector<std::string> notes;
  size_t violated() const;
};
SessionVerdicts check(const Slo& slo, const Observed& run);

// How far an observed value is past its objective's threshold, as a ratio in the bad direction
// (observed / threshold for an upper bound, threshold / observed for a lower one; infinite when
// the threshold or the value is 0).
double excess_ratio(const Objective& o, double observed);

// slo.json.
nlohmann::ordered_json to_json(const Slo& slo);
// Errors are one line saying what is wrong and where (`objective 3 has no "threshold"`).
Result<Slo> from_json(const nlohmann::json& j);
Result<Slo> read_slo_file(const std::string& path);

// `check --json` and the text report.
nlohmann::ordered_json verdicts_json(const Slo& slo, const std::string& slo_path,
                                     const std::vector<SessionVerdicts>& sessions);
std::string verdicts_text(const Slo& slo, const std::string& slo_path,
                          const std::vector<SessionVerdicts>& sessions);

// A value in its unit for people: `3.70 us`, `266.5 MiB`, `12.0 /s`, `61.0 %`.
std::string format_value(double value, std::string_view unit);

}  // namespace eacgm::slo
