// A recorded session reduced to what SLOs are held on (slo::Observed): compare's per-window
// metrics (compare/run_data.h), taken separately over the start-up phase and the steady state, the
// tail latency of each API in each, and the whole run's event and anomaly rates.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "compare/run_data.h"
#include "slo/slo.h"

namespace eacgm::slo {

// The tail latency of one API in a phase (nearest rank over all its calls at the fit's percentile),
// and what it rests on. The p90 by default, not the p99: a p99 is set by the slowest 1 % of the
// calls, and on a busy host a handful of preempted calls is 1 % of a few hundred. Measured on
// simtrain on this 2-CPU machine: healthy runs' cudaLaunchKernel p99s ranged from 4 to 17.5 us
// (the median of each window's p99, up to 29 us) while a run with every launch 17 us slower had
// 24 to 37 us; the p90s of the same runs were 3.7 to 3.9 us healthy and 21 us slow (docs/SLO.md).
struct Tail {
  double ns = 0;  // at the measured percentile (Windows::latency_percentile)
  uint64_t calls = 0;
  size_t windows = 0;  // windows with calls
};

// One session measured phase by phase: the input of observe(), and what the unit tests build by
// hand.
struct SessionMeasure {
  std::string dir;
  double seconds = 0;
  // compare's metrics over the first Windows::startup_s seconds and over the rest. The whole-run
  // counts of summary.json (compare's "events/s" and "anomalies/s" metrics) are in `steady`.
  compare::RunData startup, steady;
  // Keyed like compare's "latency" metric (process, layer, API, "latency").
  std::map<compare::MetricKey, Tail> startup_tails, steady_tails;
  int latency_percentile = kDefaultLatencyPercentile;  // the tails' percentile
  // Layers summary.json calls active: an active layer that reported no anomaly of a kind, or no
  // MAP_POPULATE mapping, had none (a zero rate, not a missing one).
  std::set<std::string> active_layers;
};

// The windows a fit cuts runs into when the user does not say: the start-up phase is a tenth of
// the shortest run, at most 300 s (the seed's five minutes after the start of training), cut into
// ten windows (at least 10 ms each); the steady state into compare's windows (a twentieth of the
// shortest run, from 50 ms to 1 s).
Windows choose_windows(const std::vector<const compare::LoadedRun*>& runs,
                       std::optional<double> startup_s, std::optional<double> window_s);

SessionMeasure measure_session(const compare::LoadedRun& run, const Windows& windows);

// The statistic of every key with data: P90 of the windows for an upper bound, P10 for a lower
// one (the value the run stayed on the good side of nine windows in ten), the fit's percentile of
// the calls for latency, the whole-run rate for events. Each API's calls per second come from
// compare's share of calls times its process's pace, so they are windowed as the pace is. Anomaly
// rates are per job (summed over processes), with a zero for every kind that matters on an active
// layer (docs/SLO.md) even when none was seen.
Observed observe(const SessionMeasure& m);

// The q-quantile (0 to 1) of `values`, interpolated between the nearest ranks; 0 for none.
double quantile(std::vector<double> values, double q);

}  // namespace eacgm::slo
