#include "compare/compare.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

#include "compare/rank_test.h"

namespace eacgm::compare {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

double ratio_of(double base, double candidate) {
  if (base == candidate) return 1;  // 0 and 0 included
  if (base == 0) return kInf;
  return candidate / base;
}

bool is_call_metric(std::string_view metric) {
  return metric == kLatency || metric == kShare || metric == kSelfTime ||
         metric == kLaunchLatency || metric == kLaunchShare || metric == kBandwidth;
}

// The calls of one API (operator, kernel) on one side, all its runs together; for collective
// lateness, the rank's entries into collectives.
struct SideCalls {
  uint64_t calls = 0, total_ns = 0;
  double seconds = 0;
};

// The metric that counts the calls behind `key`: an API's share of calls, a kernel's launch share;
// a metric that is not one of an API's counts itself.
MetricKey rate_key(const MetricKey& key) {
  MetricKey k = key;
  if (!is_call_metric(key.metric)) return k;
  k.metric = key.metric == kLaunchLatency || key.metric == kLaunchShare ? kLaunchShare : kShare;
  return k;
}

SideCalls side_calls(const std::vector<RunData>& runs, const MetricKey& key) {
  SideCalls out;
  const MetricKey rk = rate_key(key);
  for (const RunData& r : runs) {
    out.seconds += r.seconds;
    if (auto it = r.metrics.find(rk); it != r.metrics.end()) {
      out.calls += it->second.count;
      out.total_ns += it->second.total_ns;
    }
  }
  return out;
}

// One side of one metric: its samples pooled over the runs, and each run's own value.
struct Side {
  std::vector<double> samples;  // windows, or one value (events: rate) per run
  std::vector<double> per_run;  // each run's median window (events: its rate; per-run: its value)
  uint64_t count = 0;
  double seconds = 0;
};

// The metrics (MetricKey::metric) each run measured at all, by run.
using Measured = std::vector<std::set<std::string_view>>;

Measured measured(const std::vector<RunData>& runs) {
  Measured out;
  for (const RunData& r : runs) {
    std::set<std::string_view>& names = out.emplace_back();
    for (const auto& [key, values] : r.metrics) names.insert(key.metric);
  }
  return out;
}

Side pool(const std::vector<RunData>& runs, const Measured& measured, const MetricKey& key,
          const MetricInfo& info) {
  Side side;
  const bool zeros_when_absent = key.metric == kShare || key.metric == kLaunchShare;
  // A Python function a run did not sample had no share of its sampled time, and a process that
  // mapped nothing mapped 0 bytes, in a run that sampled Python (traced mmaps) at all.
  const bool zero_run_when_absent = key.metric == kPythonShare || key.metric == kMmapBytesRate;
  for (size_t i = 0; i < runs.size(); ++i) {
    const RunData& r = runs[i];
    side.seconds += r.seconds;
    auto it = r.metrics.find(key);
    if (info.sampling == Sampling::kEvents) {
      const uint64_t n = it == r.metrics.end() ? 0 : it->second.count;
      side.count += n;
      const double rate = r.seconds > 0 ? static_cast<double>(n) / r.seconds : 0;
      side.samples.push_back(rate);
      side.per_run.push_back(rate);
      continue;
    }
    if (it == r.metrics.end()) {
      // A run that never called the API had a rate of 0 in each of its windows.
      if (zeros_when_absent) {
        side.samples.insert(side.samples.end(), r.windows, 0.0);
        side.per_run.push_back(0);
      } else if (zero_run_when_absent && measured[i].contains(key.metric)) {
        side.samples.push_back(0);
        side.per_run.push_back(0);
      }
      continue;
    }
    side.count += it->second.count;
    side.samples.insert(side.samples.end(), it->second.windows.begin(), it->second.windows.end());
    if (!it->second.windows.empty()) side.per_run.push_back(median(it->second.windows));
  }
  return side;
}

// See Evidence::runs_agree. `margin` is how far beyond counts: the square root of the smallest
// ratio reported, half of it on a log scale. Merely beyond would let a run that barely differs
// (x1.001) agree, so that one odd run could make a change alone.
bool runs_agree(const Side& base, const Side& candidate, double base_value, double cand_value,
                double margin) {
  const bool up = cand_value > base_value;
  auto beyond = [up, margin](double v, double than) {
    return up ? v > than * margin : v * margin < than;
  };
  for (double v : candidate.per_run) {
    if (!beyond(v, base_value)) return false;
  }
  for (double v : base.per_run) {
    if (!beyond(cand_value, v)) return false;
  }
  return true;
}

// For whole-run events: whether the events per run moved the way their rate did, by the same
// margin. A rate is a count over the run's length, so a run that merely lasted longer or shorter
// changes it while the job did exactly what it did before (the same start-up mappings, in a run
// that trained faster): that is a change of the run's length, reported by what slowed it, not of
// the events.
bool counts_agree(const Side& base, size_t base_runs, const Side& candidate, size_t candidate_runs,
                  bool up, double margin) {
  if (base_runs == 0 || candidate_runs == 0) return false;
  const double b = static_cast<double>(base.count) / static_cast<double>(base_runs);
  const double c = static_cast<double>(candidate.count) / static_cast<double>(candidate_runs);
  return up ? c > b * margin : c * margin < b;
}

// Seconds per second of the job that the change adds (negative: saves). For collective lateness,
// the time the other ranks wait for the rank: its lateness times its collectives per second.
std::optional<double> time_share(const Change& c, const SideCalls& calls) {
  if (calls.calls == 0 || calls.seconds <= 0) return std::nullopt;
  const double per_s = static_cast<double>(calls.calls) / calls.seconds;
  if (c.key.metric == kLatency || c.key.metric == kSelfTime || c.key.metric == kLaunchLatency ||
      c.key.metric == kLateness) {
    return (c.candidate - c.base) * per_s / 1e9;
  }
  if (c.key.metric == kShare || c.key.metric == kLaunchShare) {
    // The part of the candidate's time in the API that the larger share added: 1 - 1/ratio of it.
    if (c.candidate <= 0) return std::nullopt;
    const double change = (c.candidate - c.base) / c.candidate;
    return change * static_cast<double>(calls.total_ns) / 1e9 / calls.seconds;
  }
  return std::nullopt;
}

// Regressions and improvements: by what they cost (or save), then by how large the change is.
bool costlier(const Change& a, const Change& b) {
  const double ta = a.time_share ? std::fabs(*a.time_share) : -1;
  const double tb = b.time_share ? std::fabs(*b.time_share) : -1;
  if (ta != tb) return ta > tb;
  const double la = std::isinf(a.ratio) ? kInf : std::fabs(std::log(a.ratio));
  const double lb = std::isinf(b.ratio) ? kInf : std::fabs(std::log(b.ratio));
  if (la != lb) return la > lb;
  return a.key < b.key;
}

// The first few causes of the abnormal ends of a side's runs, for the note.
std::string causes(const std::vector<RunData>& runs) {
  std::vector<std::string> out;
  for (const RunData& r : runs) {
    for (const std::string& c : r.end.causes) {
      if (out.size() < 3) out.push_back(c);
    }
  }
  return out.empty() ? "" : fmt::format(" ({})", fmt::join(out, "; "));
}

// The runs whose job ended abnormally, as a share of each side's runs: a note whenever any did,
// with what the test says of the difference.
std::string outcome_note(const Change& c, const std::vector<RunData>& base,
                         const std::vector<RunData>& candidate, const Thresholds& t) {
  auto yes = [](double pct, size_t runs) {
    return static_cast<size_t>(std::lround(pct / 100 * static_cast<double>(runs)));
  };
  std::string judgement;
  switch (c.verdict) {
    case Verdict::kTooFew:
      judgement = fmt::format(
          "too few runs to tell a change from chance (Fisher's exact test; at least {} runs a "
          "side, and enough for p < {} to be possible)",
          t.min_outcome_runs, t.alpha);
      break;
    case Verdict::kUnchanged:
      // Significant over many runs but below the effect threshold, or not significant.
      judgement = fmt::format(
          "{} (Fisher's exact test, p = {:.2g})",
          c.p < t.alpha ? "a difference too small to count" : "no significant difference", c.p);
      break;
    default:
      judgement = fmt::format("a significant difference (Fisher's exact test, p = {:.2g})", c.p);
  }
  return fmt::format(
      "runs that ended abnormally: base {} of {} ({:.0f}%){}, candidate {} of {} "
      "({:.0f}%){}: {}",
      yes(c.base, c.base_samples), c.base_samples, c.base, causes(base),
      yes(c.candidate, c.candidate_samples), c.candidate_samples, c.candidate, causes(candidate),
      judgement);
}

double log_choose(uint64_t n, uint64_t k) {
  return std::lgamma(static_cast<double>(n) + 1) - std::lgamma(static_cast<double>(k) + 1) -
         std::lgamma(static_cast<double>(n - k) + 1);
}

// The smallest two-sided p the rank test can give with n1 and n2 samples: the two splits that
// separate them completely, of C(n1 + n2, n1).
double smallest_rank_p(size_t n1, size_t n2) {
  if (n1 == 0 || n2 == 0) return 1;
  return std::min(1.0, 2 * std::exp(-log_choose(n1 + n2, n1)));
}

// The smallest p Fisher's exact test can give with n1 and n2 runs, over every outcome.
double smallest_fisher_p(uint64_t n1, uint64_t n2) {
  double best = 1;
  for (uint64_t a = 0; a <= n1; ++a) {
    for (uint64_t b = 0; b <= n2; ++b) best = std::min(best, fisher_exact_p(a, n1, b, n2));
  }
  return best;
}

}  // namespace

double fisher_exact_p(uint64_t base_yes, uint64_t base_runs, uint64_t candidate_yes,
                      uint64_t candidate_runs) {
  const uint64_t n = base_runs + candidate_runs, yes = base_yes + candidate_yes;
  if (base_yes > base_runs || candidate_yes > candidate_runs || yes == 0 || yes == n) return 1;
  // With the margins fixed, the base's count of yes is hypergeometric: C(base_runs, a)
  // C(candidate_runs, yes - a) / C(n, yes).
  auto log_p = [&](uint64_t a) {
    return log_choose(base_runs, a) + log_choose(candidate_runs, yes - a) - log_choose(n, yes);
  };
  const double observed = log_p(base_yes);
  const uint64_t lo = yes > candidate_runs ? yes - candidate_runs : 0;
  const uint64_t hi = std::min(yes, base_runs);
  double p = 0;
  for (uint64_t a = lo; a <= hi; ++a) {
    // The relative tolerance keeps tables of equal probability (a symmetric case) together.
    const double l = log_p(a);
    if (l <= observed + 1e-7) p += std::exp(l);
  }
  return std::min(1.0, p);
}

std::vector<double> pooled_samples(const std::vector<RunData>& runs, const MetricKey& key,
                                   const MetricInfo& info) {
  return pool(runs, measured(runs), key, info).samples;
}

Verdict decide(const Evidence& e, const Thresholds& t) {
  const uint64_t busier = std::max(e.base_count, e.candidate_count);
  const uint64_t quieter = std::min(e.base_count, e.candidate_count);
  // No outcome of the test could be significant (one run a side of a per-run value): too few,
  // never "unchanged", which would claim what the data cannot show.
  if (e.best_p >= t.alpha) return Verdict::kTooFew;
  switch (e.info.sampling) {
    case Sampling::kEvents:
      if (busier < t.min_events) return Verdict::kTooFew;
      break;
    case Sampling::kRuns:
      if ((e.info.needs_both ? quieter : busier) < t.min_events) return Verdict::kTooFew;
      break;
    case Sampling::kOutcomes:  // the counts are the runs
      if (quieter < t.min_outcome_runs) return Verdict::kTooFew;
      break;
    case Sampling::kWindows:
      if ((e.info.needs_both ? quieter : busier) < t.min_calls) return Verdict::kTooFew;
      break;
  }
  const bool up = e.ratio > 1;
  const bool big_ratio = e.ratio >= t.min_ratio || e.ratio <= 1 / t.min_ratio;
  // The medians and the bulk of the values must move the same way: a shift of the median
  // against the grain of the rest is no change to report.
  const bool same_way = up ? e.delta > 0 : e.delta < 0;
  const bool large = big_ratio && std::fabs(e.delta) >= t.min_delta && same_way;
  if (e.p >= t.alpha || !large || !e.runs_agree) return Verdict::kUnchanged;
  const double floor = e.info.cost_floor == CostFloor::kLateness   ? t.min_cost
                       : e.info.cost_floor == CostFloor::kCallTime ? t.min_call_time_cost
                                                                   : 0;
  if (floor > 0 && !(std::fabs(e.cost) >= floor)) return Verdict::kUnchanged;
  return up == e.info.higher_is_worse ? Verdict::kRegression : Verdict::kImprovement;
}

Comparison compare_runs(const std::vector<RunData>& base, const std::vector<RunData>& candidate,
                        double window_s, const Thresholds& thresholds) {
  Comparison out;
  out.window_s = window_s;
  for (const RunData& r : base) out.base_dirs.push_back(r.dir);
  for (const RunData& r : candidate) out.candidate_dirs.push_back(r.dir);

  std::set<MetricKey> keys;
  for (const auto* side : {&base, &candidate}) {
    for (const RunData& r : *side) {
      for (const auto& [key, values] : r.metrics) keys.insert(key);
    }
  }
  size_t matched = 0;  // APIs, operators and kernels called on both sides
  const double margin = std::sqrt(thresholds.min_ratio);
  const Measured base_measured = measured(base), candidate_measured = measured(candidate);
  for (const MetricKey& key : keys) {
    const MetricInfo info = metric_info(key.metric);
    if (is_call_metric(key.metric)) {
      const SideCalls b = side_calls(base, key), c = side_calls(candidate, key);
      if (b.calls > 0 && c.calls > 0 && (key.metric == kShare || key.metric == kLaunchShare)) {
        ++matched;
      }
      if (b.calls == 0 || c.calls == 0) {
        // Seen on one side only: listed once (by its rate metric), not judged.
        if (key.metric == kShare || key.metric == kLaunchShare) {
          const SideCalls& seen = b.calls == 0 ? c : b;
          Presence p{key.process, key.layer, key.what, seen.calls,
                     seen.seconds > 0 ? static_cast<double>(seen.calls) / seen.seconds : 0};
          (b.calls == 0 ? out.only_in_candidate : out.only_in_base).push_back(std::move(p));
        }
        continue;
      }
    }
    const Side b = pool(base, base_measured, key, info),
               c = pool(candidate, candidate_measured, key, info);
    Change change;
    change.key = key;
    change.info = info;
    change.base_count = b.count;
    change.candidate_count = c.count;
    change.base_samples = b.samples.size();
    change.candidate_samples = c.samples.size();
    RankTest test = mann_whitney(b.samples, c.samples);
    double best_p = 0;
    bool agree = true;
    if (info.sampling == Sampling::kEvents) {
      change.base = b.seconds > 0 ? static_cast<double>(b.count) / b.seconds : 0;
      change.candidate = c.seconds > 0 ? static_cast<double>(c.count) / c.seconds : 0;
      // The runs' rates are too few for the rank test to be significant; the events in them are
      // many: the exact test of two Poisson rates, with the runs agreeing (runs_agree) standing
      // for run-to-run variation.
      test.p = poisson_rate_p(b.count, b.seconds, c.count, c.seconds);
      test.exact = true;
      agree =
          runs_agree(b, c, change.base, change.candidate, margin) &&
          counts_agree(b, base.size(), c, candidate.size(), change.candidate > change.base, margin);
    } else if (info.sampling == Sampling::kOutcomes) {
      // The share of runs with the outcome (each run 100 or 0): the rank test's delta is then the
      // difference of the two shares, and the p-value Fisher's, exact for a two-by-two table. A
      // share is a figure of the set of runs: no single run can agree or disagree with it.
      auto share = [](const std::vector<double>& v) {
        double sum = 0;
        for (double x : v) sum += x;
        return v.empty() ? 0 : sum / static_cast<double>(v.size());
      };
      auto yes = [](const std::vector<double>& v) {
        return static_cast<uint64_t>(
            std::count_if(v.begin(), v.end(), [](double x) { return x > 0; }));
      };
      change.base = share(b.samples);
      change.candidate = share(c.samples);
      test.p = fisher_exact_p(yes(b.samples), b.samples.size(), yes(c.samples), c.samples.size());
      test.exact = true;
      best_p = smallest_fisher_p(b.samples.size(), c.samples.size());
    } else {
      change.base = median(b.samples);
      change.candidate = median(c.samples);
      best_p = smallest_rank_p(b.samples.size(), c.samples.size());
      agree = runs_agree(b, c, change.base, change.candidate, margin);
    }
    change.ratio = ratio_of(change.base, change.candidate);
    change.p = test.p;
    change.z = test.z;
    change.delta = test.delta;
    change.exact = test.exact;
    Evidence e{test.p, test.delta, change.ratio, b.count, c.count, info, agree};
    e.best_p = best_p;
    if (info.cost_floor != CostFloor::kNone) {
      e.cost = time_share(change, side_calls(candidate, key)).value_or(0);
    }
    change.verdict = decide(e, thresholds);
    if (key.metric == kAbnormalRuns && (change.base > 0 || change.candidate > 0)) {
      out.notes.push_back(outcome_note(change, base, candidate, thresholds));
    }
    if (key.metric == kPace &&
        (change.verdict == Verdict::kRegression || change.verdict == Verdict::kImprovement)) {
      out.notes.push_back(fmt::format(
          "{} made {:.0f}% {} calls a second ({:.0f}/s -> {:.0f}/s, p = {:.1g}): the job ran {}, "
          "or did {} work per call; a busier or quieter machine does that too",
          key.process, 100 * std::fabs(change.ratio - 1), change.ratio > 1 ? "more" : "fewer",
          change.base, change.candidate, change.p, change.ratio > 1 ? "faster" : "slower",
          change.ratio > 1 ? "less" : "more"));
      change.verdict = Verdict::kUnchanged;
    }
    if (change.verdict == Verdict::kUnchanged || change.verdict == Verdict::kTooFew) {
      ++(change.verdict == Verdict::kUnchanged ? out.unchanged : out.too_few);
      out.others.push_back(std::move(change));
      continue;
    }
    if (is_call_metric(key.metric) || key.metric == kLateness)
      change.time_share = time_share(change, side_calls(candidate, key));
    (change.verdict == Verdict::kRegression ? out.regressions : out.improvements)
        .push_back(std::move(change));
  }
  std::sort(out.regressions.begin(), out.regressions.end(), costlier);
  std::sort(out.improvements.begin(), out.improvements.end(), costlier);
  std::sort(out.others.begin(), out.others.end(),
            [](const Change& a, const Change& b) { return a.key < b.key; });
  auto by_calls = [](const Presence& a, const Presence& b) { return a.calls > b.calls; };
  std::sort(out.only_in_base.begin(), out.only_in_base.end(), by_calls);
  std::sort(out.only_in_candidate.begin(), out.only_in_candidate.end(), by_calls);

  // Most of what one side called never ran on the other: a comparison of two different jobs (or
  // of processes whose roles differ) says little, and "no regression" would mislead.
  for (const auto& [side, only] :
       {std::pair{"base", &out.only_in_base}, std::pair{"candidate", &out.only_in_candidate}}) {
    if (only->size() > matched) {
      out.notes.push_back(fmt::format(
          "{} of the {}'s {} APIs, operators and kernels (by process role) did not run on the "
          "other side: are these runs of the same job, with the same ranks and workers?",
          only->size(), side, only->size() + matched));
    }
  }
  for (const auto* side : {&base, &candidate}) {
    for (const RunData& r : *side) {
      if (r.events_dropped > 0) {
        out.notes.push_back(
            fmt::format("{} lost {} events (a full ring buffer, or records it could not "
                        "decode): its calls are incomplete",
                        r.dir, r.events_dropped));
      }
    }
  }
  return out;
}

}  // namespace eacgm::compare
