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
         metric == kLaunchLatency || metric == kLaunchShare;
}

// The calls of one API (operator, kernel) on one side, all its runs together.
struct SideCalls {
  uint64_t calls = 0, total_ns = 0;
  double seconds = 0;
};

// The rate metric that counts the calls behind `key`.
MetricKey rate_key(const MetricKey& key) {
  MetricKey k = key;
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
  std::vector<double> samples;  // windows, or one rate per run for events
  std::vector<double> per_run;  // each run's median window (events: its rate)
  uint64_t count = 0;
  double seconds = 0;
};

Side pool(const std::vector<RunData>& runs, const MetricKey& key, const MetricInfo& info) {
  Side side;
  const bool zeros_when_absent = key.metric == kShare || key.metric == kLaunchShare;
  for (const RunData& r : runs) {
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
      }
      continue;
    }
    side.count += it->second.count;
    side.samples.insert(side.samples.end(), it->second.windows.begin(), it->second.windows.end());
    if (!it->second.windows.empty()) side.per_run.push_back(median(it->second.windows));
  }
  return side;
}

// See Evidence::runs_agree.
bool runs_agree(const Side& base, const Side& candidate, double base_value, double cand_value) {
  const bool up = cand_value > base_value;
  auto beyond = [up](double v, double than) { return up ? v > than : v < than; };
  for (double v : candidate.per_run) {
    if (!beyond(v, base_value)) return false;
  }
  for (double v : base.per_run) {
    if (!beyond(cand_value, v)) return false;
  }
  return true;
}

// Seconds per second of the job that the change adds (negative: saves).
std::optional<double> time_share(const Change& c, const SideCalls& calls) {
  if (calls.calls == 0 || calls.seconds <= 0) return std::nullopt;
  const double per_s = static_cast<double>(calls.calls) / calls.seconds;
  if (c.key.metric == kLatency || c.key.metric == kSelfTime || c.key.metric == kLaunchLatency) {
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

std::string failures(const std::vector<RunData>& runs) {
  size_t failed = 0;
  std::vector<std::string> causes;
  for (const RunData& r : runs) {
    if (r.end.exit_code && *r.end.exit_code != 0) ++failed;
    for (const std::string& c : r.end.causes) {
      if (causes.size() < 3) causes.push_back(c);
    }
  }
  std::string out = fmt::format("{} of {} runs failed", failed, runs.size());
  if (!causes.empty()) out += fmt::format(" ({})", fmt::join(causes, "; "));
  return out;
}

size_t failed_runs(const std::vector<RunData>& runs) {
  return static_cast<size_t>(std::count_if(runs.begin(), runs.end(), [](const RunData& r) {
    return (r.end.exit_code && *r.end.exit_code != 0) || !r.end.causes.empty();
  }));
}

}  // namespace

Verdict decide(const Evidence& e, const Thresholds& t) {
  const uint64_t busier = std::max(e.base_count, e.candidate_count);
  const uint64_t quieter = std::min(e.base_count, e.candidate_count);
  if (e.info.sampling == Sampling::kEvents) {
    if (busier < t.min_events) return Verdict::kTooFew;
  } else if ((e.info.needs_both ? quieter : busier) < t.min_calls) {
    return Verdict::kTooFew;
  }
  const bool up = e.ratio > 1;
  const bool big_ratio = e.ratio >= t.min_ratio || e.ratio <= 1 / t.min_ratio;
  // The medians and the bulk of the values must move the same way: a shift of the median
  // against the grain of the rest is no change to report.
  const bool same_way = up ? e.delta > 0 : e.delta < 0;
  const bool large = big_ratio && std::fabs(e.delta) >= t.min_delta && same_way;
  if (e.p >= t.alpha || !large || !e.runs_agree) return Verdict::kUnchanged;
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
    const Side b = pool(base, key, info), c = pool(candidate, key, info);
    Change change;
    change.key = key;
    change.info = info;
    change.base_count = b.count;
    change.candidate_count = c.count;
    change.base_samples = b.samples.size();
    change.candidate_samples = c.samples.size();
    RankTest test = mann_whitney(b.samples, c.samples);
    if (info.sampling == Sampling::kEvents) {
      change.base = b.seconds > 0 ? static_cast<double>(b.count) / b.seconds : 0;
      change.candidate = c.seconds > 0 ? static_cast<double>(c.count) / c.seconds : 0;
      // The runs' rates are too few for the rank test to be significant; the events in them are
      // many: the exact test of two Poisson rates, with the runs agreeing (runs_agree) standing
      // for run-to-run variation.
      test.p = poisson_rate_p(b.count, b.seconds, c.count, c.seconds);
      test.exact = true;
    } else {
      change.base = median(b.samples);
      change.candidate = median(c.samples);
    }
    change.ratio = ratio_of(change.base, change.candidate);
    change.p = test.p;
    change.z = test.z;
    change.delta = test.delta;
    change.exact = test.exact;
    Evidence e{test.p,
               test.delta,
               change.ratio,
               b.count,
               c.count,
               info,
               runs_agree(b, c, change.base, change.candidate)};
    change.verdict = decide(e, thresholds);
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
    if (is_call_metric(key.metric))
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
  if (failed_runs(base) != failed_runs(candidate)) {
    out.notes.push_back(
        fmt::format("base: {}; candidate: {}", failures(base), failures(candidate)));
  }
  for (const auto* side : {&base, &candidate}) {
    for (const RunData& r : *side) {
      if (r.events_dropped > 0) {
        out.notes.push_back(
            fmt::format("{} lost {} events (a full ring buffer): its calls are incomplete", r.dir,
                        r.events_dropped));
      }
    }
  }
  return out;
}

}  // namespace eacgm::compare
