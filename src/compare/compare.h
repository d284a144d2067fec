// `eacgm compare`: what changed between two sets of runs of one job. Each metric of each run
// (run_data.h) is pooled per side, the two sides are tested against each other (rank_test.h), and
// the decision rule below calls it a regression, an improvement, unchanged, or too rare to judge.
// docs/COMPARE.md explains the statistic and its thresholds.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "compare/run_data.h"

namespace eacgm::compare {

struct Thresholds {
  // A change must be significant: two-sided p below this. Strict, because one comparison tests
  // hundreds of metrics and each would otherwise flag one time in twenty by chance.
  double alpha = 0.01;
  // ...and large, in two senses: the medians differ by this factor (either way)...
  double min_ratio = 1.2;
  // ...and the values hardly overlap: |Cliff's delta| at least this ("large" in the usual reading
  // of the statistic: 0.147 small, 0.33 medium, 0.474 large).
  double min_delta = 0.474;
  // Calls (latency: on both sides; rate: on either) below which an API is too rare to judge.
  uint64_t min_calls = 100;
  // Whole-run events (MAP_POPULATE mappings, signals, anomalies) on the busier side; for per-run
  // values, the samples, mappings, ioctls or allocations behind them.
  uint64_t min_events = 10;
  // Metrics judged by cost (collective lateness): the change must cost or save at least this
  // share of the job's time (here: of the time the other ranks wait, per second).
  double min_cost = 0.01;
  // Latency, self time and launch latency: the change costs or saves at least this share of the
  // process role's time (0.2 %: 2 ms a second), its difference of medians times its calls a second.
  double min_call_time_cost = 0.002;
  // Outcomes (runs that ended abnormally) are judged only with at least this many runs a side: a
  // rate of one or two runs is no rate.
  uint64_t min_outcome_runs = 3;
};

enum class Verdict { kRegression, kImprovement, kUnchanged, kTooFew };

// What the decision rule looks at for one metric.
struct Evidence {
  double p = 1;
  double delta = 0;  // Cliff's delta, candidate against base
  double ratio = 1;  // candidate / base: +inf when the base is 0 and the candidate is not
  uint64_t base_count = 0, candidate_count = 0;
  MetricInfo info;
  // With several runs a side, whether every run points the same way: each candidate run beyond
  // the base side's value and each base run short of the candidate's, by at least the square
  // root of the smallest ratio reported. One odd run (a noisy neighbour on the machine) then
  // cannot make a change on its own. For whole-run events, also the events per run: a rate that
  // moved only because the runs lasted longer or shorter is no change of the events.
  bool runs_agree = true;
  // The smallest p-value the test could give with these many samples, whatever their values (the
  // rank test: 2 / C(n1 + n2, n1)). At or above alpha no outcome could be significant: too few
  // samples (runs, for per-run values) to judge, which "unchanged" would misstate.
  double best_p = 0;
  // For metrics with a cost floor: what the change costs, in seconds per second of the job.
  double cost = 0;
};

Verdict decide(const Evidence& e, const Thresholds& t);

// Two-sided p-value of Fisher's exact test that two sides have the same rate of an outcome, given
// `base_yes` of `base_runs` and `candidate_yes` of `candidate_runs`: the probability, under the
// hypergeometric distribution of the tables with the same margins, of a table at most as likely
// as the observed one.
double fisher_exact_p(uint64_t base_yes, uint64_t base_runs, uint64_t candidate_yes,
                      uint64_t candidate_runs);

struct Change {
  MetricKey key;
  MetricInfo info;
  Verdict verdict = Verdict::kUnchanged;
  // The medians of the per-window (per-run) values; events: the rates; outcomes: the % of runs.
  double base = 0, candidate = 0;
  double ratio = 1;  // candidate / base; +inf for a value that was 0
  double p = 1, z = 0, delta = 0;
  bool exact = false;
  size_t base_samples = 0, candidate_samples = 0;  // windows (events, per-run values: runs)
  uint64_t base_count = 0, candidate_count = 0;    // calls, samples or events
  // What the change costs: seconds per second of the job more (less) spent in the API or operator
  // in the candidate (collective lateness: waited for the rank by the others); for metrics that
  // are not time (memory, GPU readings, bandwidth, events, per-run values) none.
  std::optional<double> time_share;
};

// An API, operator or kernel seen on one side only.
struct Presence {
  std::string process, layer, what;
  uint64_t calls = 0;
  double per_s = 0;
};

struct Comparison {
  std::vector<std::string> base_dirs, candidate_dirs;
  double window_s = 0;
  std::vector<Change> regressions;   // the most costly first
  std::vector<Change> improvements;  // the most saving first
  size_t unchanged = 0;
  size_t too_few = 0;          // metrics with too few calls or events to judge
  std::vector<Change> others;  // the unchanged and too-few ones, for --all
  std::vector<Presence> only_in_base, only_in_candidate;
  std::vector<std::string> notes;  // runs that ended abnormally, events lost, the job's pace
};

Comparison compare_runs(const std::vector<RunData>& base, const std::vector<RunData>& candidate,
                        double window_s, const Thresholds& thresholds = {});

// The samples the test compares for `key` on one side, as compare_runs pools them: every window
// of every run, one value a run (per-run values, outcomes; events: each run's rate), with the
// zeros of the runs that had none of a share. For drawing what a verdict rests on.
std::vector<double> pooled_samples(const std::vector<RunData>& runs, const MetricKey& key,
                                   const MetricInfo& info);

}  // namespace eacgm::compare
