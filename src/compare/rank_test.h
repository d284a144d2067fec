// The statistics of `eacgm compare`: the Mann-Whitney U test (rank-sum test) with Cliff's delta as
// its effect size, and an exact test for two event rates. Both are distribution-free, because the
// per-window values they compare (latency medians, call rates) are skewed and heavy-tailed and
// nothing says they are Gaussian. docs/COMPARE.md says how compare uses them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace eacgm::compare {

struct RankTest {
  size_t n_base = 0, n_candidate = 0;
  // U of the candidate sample: pairs (base x, candidate y) with y > x, plus half the ties.
  double u = 0;
  // The normal approximation's z (with the tie correction and a continuity correction of 1/2);
  // 0 when every value is tied. Reported even when `exact`.
  double z = 0;
  // Two-sided p-value: exact (the permutation distribution of the rank sums, ties included) when
  // the samples are small, else from z.
  double p = 1;
  bool exact = false;
  // Cliff's delta: P(y > x) - P(y < x), from -1 (every candidate value below every base value) to
  // +1 (every one above). 2U / (n_base n_candidate) - 1.
  double delta = 0;
};

// Samples at most this large on the smaller side are tested exactly (the permutation distribution
// is counted, not approximated): there the normal approximation is off by more than the p-values
// that matter, and the count is cheap (at most 2 * N^3 / 2 steps for N values in all).
inline constexpr size_t kExactMaxSmaller = 12;
inline constexpr size_t kExactMaxTotal = 80;

// Either sample empty: p = 1, delta = 0.
RankTest mann_whitney(std::span<const double> base, std::span<const double> candidate);

// Two-sided exact p-value that two Poisson processes have the same rate, given `base_events` in
// `base_seconds` and `candidate_events` in `candidate_seconds`: conditioned on the total, the
// candidate's count is binomial with p = candidate_seconds / (both). For counts of whole-run
// events (MAP_POPULATE mappings, signals, anomalies) that have no per-window values.
double poisson_rate_p(uint64_t base_events, double base_seconds, uint64_t candidate_events,
                      double candidate_seconds);

// The median (analysis/features.h), but 0 for no values.
double median(std::vector<double> values);

}  // namespace eacgm::compare
