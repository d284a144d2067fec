#include "compare/rank_test.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <utility>

#include "analysis/features.h"

namespace eacgm::compare {
namespace {

struct Ranked {
  std::vector<int64_t> doubled_rank;  // twice the midrank of each value (integers, ties included)
  std::vector<bool> from_candidate;
  double tie_term = 0;  // sum over tie groups of t^3 - t
};

// Midranks of the pooled values, doubled so that they stay integers (a tie group of two values at
// ranks 3 and 4 gets 3.5 each: 7 doubled).
Ranked rank_pooled(std::span<const double> base, std::span<const double> candidate) {
  std::vector<std::pair<double, bool>> pooled;
  pooled.reserve(base.size() + candidate.size());
  for (double v : base) pooled.emplace_back(v, false);
  for (double v : candidate) pooled.emplace_back(v, true);
  std::sort(pooled.begin(), pooled.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  Ranked out;
  out.doubled_rank.resize(pooled.size());
  out.from_candidate.resize(pooled.size());
  for (size_t i = 0; i < pooled.size();) {
    size_t j = i;
    while (j < pooled.size() && pooled[j].first == pooled[i].first) ++j;
    // Ranks i+1 .. j (1-based): their mean doubled is i + 1 + j.
    const auto doubled = static_cast<int64_t>(i + 1 + j);
    for (size_t k = i; k < j; ++k) {
      out.doubled_rank[k] = doubled;
      out.from_candidate[k] = pooled[k].second;
    }
    const auto t = static_cast<double>(j - i);
    out.tie_term += t * t * t - t;
    i = j;
  }
  return out;
}

// Exact two-sided p: the share of the C(N, m) ways to pick m of the pooled values whose doubled
// rank sum lies at least as far from its mean as the observed one. Counted by dynamic programming
// over (values picked, sum), in doubles: C(80, 12) is about 8e13, far within their exact range.
double exact_p(const std::vector<int64_t>& doubled_rank, size_t m, int64_t observed) {
  const size_t n = doubled_rank.size();
  int64_t total = 0;
  for (int64_t r : doubled_rank) total += r;
  const auto max_sum = static_cast<size_t>(total);
  // ways[k][s]: subsets of k of the values seen so far with doubled rank sum s.
  std::vector<std::vector<double>> ways(m + 1, std::vector<double>(max_sum + 1, 0.0));
  ways[0][0] = 1;
  size_t seen = 0;
  for (int64_t r : doubled_rank) {
    ++seen;
    const auto rank = static_cast<size_t>(r);
    for (size_t k = std::min(m, seen); k >= 1; --k) {
      const std::vector<double>& from = ways[k - 1];
      std::vector<double>& to = ways[k];
      for (size_t s = max_sum; s >= rank; --s) {
        to[s] += from[s - rank];
        if (s == rank) break;
      }
    }
  }
  // A rank's mean is (N + 1) / 2, so the mean of m doubled ranks' sum is the integer m (N + 1).
  const auto mean2 = static_cast<int64_t>(m * (n + 1));
  const int64_t distance = std::llabs(observed - mean2);
  double extreme = 0, all = 0;
  for (size_t s = 0; s <= max_sum; ++s) {
    const double w = ways[m][s];
    if (w == 0) continue;
    all += w;
    if (std::llabs(static_cast<int64_t>(s) - mean2) >= distance) extreme += w;
  }
  return all > 0 ? std::min(1.0, extreme / all) : 1.0;
}

double log_binomial_pmf(uint64_t k, uint64_t n, double p) {
  if (p <= 0) return k == 0 ? 0 : -INFINITY;
  if (p >= 1) return k == n ? 0 : -INFINITY;
  const auto kd = static_cast<double>(k), nd = static_cast<double>(n);
  return std::lgamma(nd + 1) - std::lgamma(kd + 1) - std::lgamma(nd - kd + 1) + kd * std::log(p) +
         (nd - kd) * std::log1p(-p);
}

}  // namespace

RankTest mann_whitney(std::span<const double> base, std::span<const double> candidate) {
  RankTest out;
  out.n_base = base.size();
  out.n_candidate = candidate.size();
  if (base.empty() || candidate.empty()) return out;
  const Ranked ranked = rank_pooled(base, candidate);
  const auto n1 = static_cast<double>(base.size());
  const auto n2 = static_cast<double>(candidate.size());
  const double n = n1 + n2;
  int64_t candidate_doubled = 0;
  for (size_t i = 0; i < ranked.doubled_rank.size(); ++i) {
    if (ranked.from_candidate[i]) candidate_doubled += ranked.doubled_rank[i];
  }
  out.u = static_cast<double>(candidate_doubled) / 2.0 - n2 * (n2 + 1) / 2.0;
  out.delta = 2.0 * out.u / (n1 * n2) - 1.0;

  const double mean = n1 * n2 / 2.0;
  const double variance = n1 * n2 / 12.0 * ((n + 1) - ranked.tie_term / (n * (n - 1)));
  if (variance > 0) {
    // The continuity correction moves U half a step toward the mean (never past it).
    const double distance = std::max(0.0, std::fabs(out.u - mean) - 0.5);
    out.z = std::copysign(distance / std::sqrt(variance), out.u - mean);
    out.p = std::erfc(std::fabs(out.z) / std::sqrt(2.0));
  } else {
    out.z = 0;
    out.p = 1;  // every value tied: no evidence of any difference
  }

  const size_t smaller = std::min(base.size(), candidate.size());
  if (smaller <= kExactMaxSmaller && base.size() + candidate.size() <= kExactMaxTotal &&
      variance > 0) {
    // Count the smaller sample's rank sum; the test is symmetric in which side is counted.
    const bool count_candidate = candidate.size() <= base.size();
    int64_t observed = 0;
    for (size_t i = 0; i < ranked.doubled_rank.size(); ++i) {
      if (ranked.from_candidate[i] == count_candidate) observed += ranked.doubled_rank[i];
    }
    out.p = exact_p(ranked.doubled_rank, smaller, observed);
    out.exact = true;
  }
  return out;
}

double poisson_rate_p(uint64_t base_events, double base_seconds, uint64_t candidate_events,
                      double candidate_seconds) {
  const uint64_t total = base_events + candidate_events;
  if (total == 0 || base_seconds <= 0 || candidate_seconds <= 0) return 1;
  const double share = candidate_seconds / (base_seconds + candidate_seconds);
  // Two-sided as in R's binom.test: every count at most as likely as the observed one. The
  // relative tolerance keeps counts of equal probability (a symmetric case) on the same side.
  const double observed = log_binomial_pmf(candidate_events, total, share);
  double p = 0;
  for (uint64_t k = 0; k <= total; ++k) {
    const double l = log_binomial_pmf(k, total, share);
    if (l <= observed + 1e-7) p += std::exp(l);
  }
  return std::min(1.0, p);
}

double median(std::vector<double> values) {
  return values.empty() ? 0 : eacgm::median(std::move(values));
}

}  // namespace eacgm::compare
