#include "slo/measure.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <utility>

#include "probes/probe_table.h"
#include "session/percentile.h"

namespace eacgm::slo {
namespace {

constexpr double kMaxStartupS = 300;  // seed 000 §4.4: the first five minutes of training
constexpr double kStartupShare = 0.1;
constexpr double kStartupWindows = 10;
constexpr double kMinStartupWindowS = 0.01;

// The anomaly kinds that matter on each layer whether or not a healthy run had one: a hang or an
// OOM kill the healthy runs never had is a violation at any rate (seed 000 §4.4's NCCL timeout
// rate). Kinds a healthy run did report get a rate from the data as well.
struct LayerKinds {
  std::string_view layer;
  std::vector<std::string_view> kinds;
};
const std::vector<LayerKinds>& kinds_that_matter() {
  static const std::vector<LayerKinds> kinds = {
      {"nccl", {"hang", "straggler"}},
      {"cuda", {"leak"}},
      {"os", {"oom_kill", "mmap_storm"}},
      {"gpu", {"xid", "ecc"}},
  };
  return kinds;
}

// A copy of `run` holding only the calls and collective entries that began in [from_ns, to_ns)
// and the GPU samples taken then, measured as if the session had lasted that span (compare's
// windows start at the session's start). The copy's calls name their APIs through the original's
// interned names: `run` must outlive it. With `summary`, the whole run's summary.json goes along
// (its counts have no times).
compare::LoadedRun crop(const compare::LoadedRun& run, uint64_t from_ns, uint64_t to_ns,
                        bool summary) {
  const RecordedSession& s = *run.session;
  auto part = std::make_unique<RecordedSession>();
  part->dir = s.dir;
  part->start_ns = from_ns;
  part->end_ns = to_ns;
  part->processes = s.processes;
  part->process_end_ns = s.process_end_ns;
  const bool places = s.places.size() == s.calls.size();
  for (size_t i = 0; i < s.calls.size(); ++i) {
    const CallSample& c = s.calls[i];
    if (c.start_ns < from_ns || c.start_ns >= to_ns) continue;
    part->calls.push_back(c);
    if (places) part->places.push_back(s.places[i]);
  }
  compare::LoadedRun out;
  out.session = std::move(part);
  if (summary) out.summary = run.summary;
  for (const compare::GpuReading& r : run.gpu) {
    if (r.ts_ns >= from_ns && r.ts_ns < to_ns) out.gpu.push_back(r);
  }
  for (const compare::CollectiveEntry& e : run.collectives) {
    if (e.start_ns >= from_ns && e.start_ns < to_ns) out.collectives.push_back(e);
  }
  // Python's sampled time has no times: the whole run's, like the summary's counts.
  if (summary) out.python = run.python;
  return out;
}

// The Tail of each (process role, layer, API)'s calls that began in [from_ns, to_ns), in windows
// of `window_ns` from `from_ns`.
std::map<compare::MetricKey, Tail> tails(const RecordedSession& s, uint64_t from_ns, uint64_t to_ns,
                                         uint64_t window_ns, int percentile) {
  std::map<uint32_t, std::string> roles;
  // key -> window -> durations
  std::map<compare::MetricKey, std::map<uint64_t, std::vector<uint64_t>>> durations;
  for (const CallSample& c : s.calls) {
    if (c.start_ns < from_ns || c.start_ns >= to_ns) continue;
    auto [it, fresh] = roles.try_emplace(c.pid);
    if (fresh) {
      auto p = s.processes.find(c.pid);
      it->second = entity_key(p == s.processes.end() ? EntityInfo{} : p->second);
    }
    durations[{it->second, std::string(layer_name(c.layer)), std::string(c.name),
               std::string(compare::kLatency)}][(c.start_ns - from_ns) / window_ns]
        .push_back(c.duration_ns);
  }
  std::map<compare::MetricKey, Tail> out;
  for (auto& [key, windows] : durations) {
    Tail t;
    std::vector<uint64_t> all;
    for (auto& [w, d] : windows) all.insert(all.end(), d.begin(), d.end());
    t.calls = all.size();
    t.windows = windows.size();
    t.ns = static_cast<double>(nearest_rank_percentile(std::move(all), percentile));
    out[key] = t;
  }
  return out;
}

// An API's calls per second in each window of its process's pace: compare's "share of calls" of
// the API times the process's "calls/s". Both cover the same windows, those in which the process
// was active (compare/run_data.cpp), except that the shares leave out the windows in which the
// process made no call at all, whose rate is 0. So the rates are the API's own counts over the
// windows' lengths, windowed exactly as the process's pace is. nullopt when the two do not line up
// (a process with no pace).
std::optional<std::vector<double>> api_call_rates(const compare::RunData& data,
                                                  const compare::MetricKey& share,
                                                  const std::vector<double>& shares) {
  const auto pace =
      data.metrics.find({share.process, "all", "all calls", std::string(compare::kPace)});
  if (pace == data.metrics.end()) return std::nullopt;
  std::vector<double> rates;
  size_t next = 0;
  for (const double all : pace->second.windows) {
    if (all <= 0) {
      rates.push_back(0);
      continue;
    }
    if (next == shares.size()) return std::nullopt;
    rates.push_back(all * shares[next++] / 100);
  }
  if (next != shares.size()) return std::nullopt;
  return rates;
}

// The windows of a per-call statistic (compare's per-window medians, in window order) without
// the first and the last when there are more than four, as compare cuts a process's rates and
// memory (its Active::range): an operator's first window holds the first calls of the job's
// steps, whose first one pays for lazy set-up (measured on train_softmax.py: a 334 us first
// aten::nll_loss against 3.5 us after), and often little else; when that window holds one call,
// its median is that call, and with ten windows a P90 is a fifth of the way to it.
std::vector<double> inner_windows(const std::vector<double>& windows) {
  if (windows.size() <= 4) return windows;
  return {windows.begin() + 1, windows.end() - 1};
}

}  // namespace

double quantile(std::vector<double> values, double q) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const double pos = std::clamp(q, 0.0, 1.0) * static_cast<double>(values.size() - 1);
  const auto lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(lo + 1, values.size() - 1);
  return values[lo] + (values[hi] - values[lo]) * (pos - static_cast<double>(lo));
}

Windows choose_windows(const std::vector<const compare::LoadedRun*>& runs,
                       std::optional<double> startup_s, std::optional<double> window_s) {
  double shortest = std::numeric_limits<double>::infinity();
  for (const compare::LoadedRun* r : runs) shortest = std::min(shortest, compare::run_seconds(*r));
  if (!std::isfinite(shortest)) shortest = 0;
  Windows w;
  w.startup_s = startup_s ? *startup_s : std::min(kMaxStartupS, kStartupShare * shortest);
  w.startup_window_s = std::max(kMinStartupWindowS, w.startup_s / kStartupWindows);
  w.steady_window_s =
      window_s ? *window_s : static_cast<double>(compare::choose_window_ns(runs)) / 1e9;
  return w;
}

SessionMeasure measure_session(const compare::LoadedRun& run, const Windows& windows) {
  const RecordedSession& s = *run.session;
  SessionMeasure m;
  m.dir = s.dir;
  m.seconds = compare::run_seconds(run);
  const uint64_t boundary = std::min(
      s.end_ns, s.start_ns + static_cast<uint64_t>(std::max(0.0, windows.startup_s) * 1e9));
  auto ns = [](double seconds) {
    return std::max<uint64_t>(1, static_cast<uint64_t>(seconds * 1e9));
  };
  if (boundary > s.start_ns) {
    m.startup =
        compare::measure_run(crop(run, s.start_ns, boundary, false), ns(windows.startup_window_s));
    m.startup_tails =
        tails(s, s.start_ns, boundary, ns(windows.startup_window_s), windows.latency_percentile);
  }
  m.steady =
      compare::measure_run(crop(run, boundary, s.end_ns + 1, true), ns(windows.steady_window_s));
  m.steady_tails =
      tails(s, boundary, s.end_ns + 1, ns(windows.steady_window_s), windows.latency_percentile);
  m.latency_percentile = windows.latency_percentile;
  if (run.summary.is_object()) {
    if (const auto layers = run.summary.find("layers");
        layers != run.summary.end() && layers->is_object()) {
      for (const auto& [name, layer] : layers->items()) {
        if (layer.is_object() && layer.value("status", "") == "active") {
          m.active_layers.insert(name);
        }
      }
    }
  }
  return m;
}

Observed observe(const SessionMeasure& m) {
  Observed out;
  out.dir = m.dir;
  out.seconds = m.seconds;
  auto windowed = [&](Phase phase, const compare::RunData& data) {
    // P90 of the windows for an upper bound, P10 for a lower one.
    auto put = [&](const compare::MetricKey& k, std::string_view metric,
                   const std::vector<double>& windows, uint64_t count) {
      if (windows.empty()) return;
      const Bound bound = metric_rule(metric)->bound;
      out.values[{phase, k.process, k.layer, k.what, std::string(metric)}] =
          Observation{quantile(windows, bound == Bound::kUpper ? 0.9 : 0.1), count, windows.size()};
    };
    for (const auto& [k, v] : data.metrics) {
      std::string_view metric;
      if (k.metric == compare::kShare) {
        // Each API, operator or function: its share of its process's calls (a storm of it) and
        // its own calls per second (a drop).
        put(k, kCallShare, v.windows, v.count);
        if (const auto rates = api_call_rates(data, k, v.windows)) {
          put(k, kCallRate, *rates, v.count);
        }
        continue;
      }
      if (k.metric == compare::kPace) {
        metric = kCallRate;
      } else if (k.metric == compare::kSelfTime) {
        put(k, kSelfTime, inner_windows(v.windows), v.count);
        continue;
      } else if (k.metric == compare::kMemoryPeak) {
        metric = kDeviceMemory;
      } else if (k.metric == compare::kGpuUtil) {
        metric = kGpuUtilization;
      } else if (k.metric == compare::kGpuMemory) {
        metric = kGpuMemory;
      } else if (k.metric == compare::kLateness) {
        metric = kCollectiveLateness;
      } else if (k.metric == compare::kBandwidth) {
        metric = kNcclBandwidth;
      } else {
        continue;
      }
      put(k, metric, v.windows, v.count);
    }
  };
  windowed(Phase::kStartup, m.startup);
  windowed(Phase::kSteady, m.steady);
  const std::string tail_metric = tail_latency_metric(m.latency_percentile);
  for (const auto& [phase, tails] :
       {std::pair{Phase::kStartup, &m.startup_tails}, std::pair{Phase::kSteady, &m.steady_tails}}) {
    for (const auto& [k, t] : *tails) {
      out.values[{phase, k.process, k.layer, k.what, tail_metric}] =
          Observation{t.ns, t.calls, t.windows};
    }
  }

  // Whole-run counts, per job: which process of a job hangs or maps with MAP_POPULATE changes
  // from run to run, the job's rate is what an SLO holds.
  const double seconds = m.seconds > 0 ? m.seconds : 1;
  std::map<ObjectiveKey, uint64_t> counts;
  if (m.active_layers.contains("os")) {
    counts[{Phase::kRun, "job", "os", "MAP_POPULATE mmaps", std::string(kEventRate)}] = 0;
  }
  for (const LayerKinds& lk : kinds_that_matter()) {
    if (!m.active_layers.contains(std::string(lk.layer))) continue;
    for (std::string_view kind : lk.kinds) {
      counts[{Phase::kRun, "job", std::string(lk.layer), std::string(kind),
              std::string(kAnomalyRate)}] = 0;
    }
  }
  for (const auto& [k, v] : m.steady.metrics) {
    if (k.metric == compare::kEventRate && k.what == "MAP_POPULATE mmaps") {
      counts[{Phase::kRun, "job", k.layer, k.what, std::string(kEventRate)}] += v.count;
    } else if (k.metric == compare::kAnomalyRate) {
      counts[{Phase::kRun, "job", k.layer, k.what, std::string(kAnomalyRate)}] += v.count;
    }
  }
  for (const auto& [key, n] : counts) {
    out.values[key] = Observation{static_cast<double>(n) / seconds, n, 0};
  }

  if (m.steady.events_dropped > 0) {
    out.notes.push_back(
        fmt::format("{}: {} events were lost (a full ring buffer, or records it could not "
                    "decode): its calls are incomplete",
                    m.dir, m.steady.events_dropped));
  }
  if (m.steady.end.exit_code && *m.steady.end.exit_code != 0) {
    out.notes.push_back(
        fmt::format("{}: the job exited with code {}", m.dir, *m.steady.end.exit_code));
  }
  return out;
}

}  // namespace eacgm::slo
