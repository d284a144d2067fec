#include "analysis/gmm_kernels.h"

// No fused multiply-add, even in the clones whose instruction set has it: the same operations,
// rounded the same way, on every machine.
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

namespace eacgm::detail {

using Eigen::Index;

KernelModel::KernelModel(const GaussianMixture& model)
    : k(model.n_components()),
      d(model.n_features()),
      full(model.covariance_type() == CovarianceType::kFull) {
  means.resize(static_cast<std::size_t>(k * d));
  inverse.resize(static_cast<std::size_t>(full ? k * d * d : k * d));
  log_norm.resize(static_cast<std::size_t>(k));
  for (Index c = 0; c < k; ++c) {
    const Eigen::MatrixXd& inv = model.inverse_cholesky(static_cast<int>(c));
    for (Index j = 0; j < d; ++j) {
      means[c * d + j] = model.means()(c, j);
      if (full) {
        for (Index l = 0; l < d; ++l) inverse[(c * d + j) * d + l] = inv(j, l);
      } else {
        inverse[c * d + j] = inv(j, j);
      }
    }
    log_norm[c] = model.log_normalizers()[c];
  }
}

namespace {

// Four lanes of doubles (two SSE2 registers, one AVX2 register), and the lane masks comparisons
// produce (all ones or zero). A C-style cast between the two reinterprets the bits (GCC's vector
// semantics). (Eight lanes would halve the accumulator traffic, but GCC lowers 64-byte vectors to
// AVX2 poorly: scalar code for max and select.) Helpers take vectors by reference: passing 32-byte
// vectors by value would change the ABI between the clones (GCC's -Wpsabi).
constexpr Index kLanes = 4;
using vd = double __attribute__((vector_size(8 * kLanes)));
using vl = std::int64_t __attribute__((vector_size(8 * kLanes)));

// Heap arrays of vectors, 32-byte aligned in every clone. (GCC aligns vd to 16 bytes where AVX
// is off, so std::vector<vd> would be 16-byte aligned, while the AVX2 clones load it with
// instructions that need 32.)
class Lanes {
 public:
  explicit Lanes(std::size_t n) : slots_(n, Slot{vd{}}) {}
  vd* data() { return &slots_.data()->v; }
  vd& operator[](std::size_t i) { return slots_[i].v; }
  std::size_t size() const { return slots_.size(); }

 private:
  struct alignas(32) Slot {
    vd v;
  };
  std::vector<Slot> slots_;
};

#define EACGM_ALWAYS_INLINE inline __attribute__((always_inline))
#define EACGM_LAMBDA_ALWAYS_INLINE __attribute__((always_inline))
#define EACGM_SPLAT(value) (vd{} + (value))

EACGM_ALWAYS_INLINE void load(vd& v, const double* p) { std::memcpy(&v, p, sizeof v); }

// exp(x) for x ≤ 0, lane by lane: 2^n · exp(r), n = round(x / ln 2), r = x − n ln 2 in two parts
// (Cody & Waite), exp(r) by its Taylor series to r¹³ (|r| ≤ ln2/2: truncation below 1e-17),
// evaluated by Estrin's scheme (a short dependency chain, unlike Horner's).
// Results under the smallest normal double are flushed to 0; NaN stays NaN.
EACGM_ALWAYS_INLINE void exp_nonpositive(vd& x) {
  constexpr double kMin = -708.3964185322641;  // log(DBL_MIN)
  constexpr double kLog2e = 1.4426950408889634;
  constexpr double kLn2Hi = 0x1.62e42fee00000p-1;  // 32 significant bits: n · kLn2Hi is exact
  constexpr double kLn2Lo = 0x1.a39ef35793c76p-33;
  constexpr double kShifter = 0x1.8p52;  // adding it rounds to an integer, kept in the low bits
  constexpr double c[14] = {1.0,
                            1.0,
                            1.0 / 2,
                            1.0 / 6,
                            1.0 / 24,
                            1.0 / 120,
                            1.0 / 720,
                            1.0 / 5040,
                            1.0 / 40320,
                            1.0 / 362880,
                            1.0 / 3628800,
                            1.0 / 39916800,
                            1.0 / 479001600,
                            1.0 / 6227020800.0};
  const vl tiny = x < kMin;
  const vd xc = tiny ? EACGM_SPLAT(0.0) : x;
  const vd t = xc * kLog2e + kShifter;
  const vd n = t - kShifter;
  const vd r = (xc - n * kLn2Hi) - n * kLn2Lo;
  const vd r2 = r * r;
  const vd r4 = r2 * r2;
  const vd r8 = r4 * r4;
  const vd q0 = c[0] + c[1] * r, q1 = c[2] + c[3] * r, q2 = c[4] + c[5] * r;
  const vd q3 = c[6] + c[7] * r, q4 = c[8] + c[9] * r, q5 = c[10] + c[11] * r;
  const vd q6 = c[12] + c[13] * r;
  const vd s0 = q0 + q1 * r2, s1 = q2 + q3 * r2, s2 = q4 + q5 * r2;
  const vd p = (s0 + s1 * r4) + (s2 + q6 * r4) * r8;
  const vl n_int = (vl)t - std::bit_cast<std::int64_t>(kShifter);
  const vl scale_bits = (n_int + 1023) << 52;  // n ∈ [−1022, 0]: a normal power of two
  const vd scaled = p * (vd)scale_bits;
  x = tiny ? EACGM_SPLAT(0.0) : scaled;
}

// log(x) for positive normal x, lane by lane: x = m · 2^e with m ∈ [√½, √2), and
// log m = 2 atanh(f), f = (m − 1)/(m + 1), |f| ≤ 0.172, by its series to f²³ (below 1e-18).
EACGM_ALWAYS_INLINE void log_positive(vd& x) {
  constexpr double kLn2Hi = 0x1.62e42fee00000p-1;
  constexpr double kLn2Lo = 0x1.a39ef35793c76p-33;
  constexpr double kSqrt2 = 1.4142135623730951;
  constexpr double kTwo52 = 0x1p52;
  const vl bits = (vl)x;
  // The biased exponent as a double, exactly: 2^52 + e has e in its low mantissa bits. (AVX2 has
  // no 64-bit integer to double conversion.)
  const vd biased = (vd)((bits >> 52) | std::bit_cast<std::int64_t>(kTwo52)) - kTwo52;
  const vl mantissa = (bits & 0x000fffffffffffffLL) | 0x3ff0000000000000LL;
  vd m = (vd)mantissa;
  const vl big = m > kSqrt2;
  m = big ? m * 0.5 : m;
  const vd e = biased - 1023.0 + (big ? EACGM_SPLAT(1.0) : EACGM_SPLAT(0.0));
  const vd f = (m - 1.0) / (m + 1.0);
  const vd f2 = f * f;
  const vd f4 = f2 * f2;
  const vd f8 = f4 * f4;
  // Σ f2^j / (2j + 1), j = 0..11, by Estrin's scheme.
  const vd a0 = 1.0 + f2 * (1.0 / 3), a1 = 1.0 / 5 + f2 * (1.0 / 7);
  const vd a2 = 1.0 / 9 + f2 * (1.0 / 11), a3 = 1.0 / 13 + f2 * (1.0 / 15);
  const vd a4 = 1.0 / 17 + f2 * (1.0 / 19), a5 = 1.0 / 21 + f2 * (1.0 / 23);
  const vd s = (a0 + a1 * f4) + (a2 + a3 * f4) * f8 + (a4 + a5 * f4) * (f8 * f8);
  const vd result = e * kLn2Hi + (2.0 * f * s + e * kLn2Lo);
  x = x == x ? result : x;  // NaN stays NaN
}

EACGM_ALWAYS_INLINE double lane_sum(const vd& v) { return (v[0] + v[1]) + (v[2] + v[3]); }
static_assert(kLanes == 4, "lane_sum adds four lanes");

// The kernels are templates on the number of features D (0: any, read from the model; 1..8:
// fixed, so that loops unroll and a sample's features stay in registers) and on whether the
// covariances are full. `with_shape` calls fn(D, Full) with the matching constants.
constexpr Index kMaxFixedFeatures = 8;

template <typename Fn>
EACGM_ALWAYS_INLINE void with_features(Index d, Fn&& fn) {
  switch (d) {
    case 1:
      return fn(std::integral_constant<Index, 1>{});
    case 2:
      return fn(std::integral_constant<Index, 2>{});
    case 3:
      return fn(std::integral_constant<Index, 3>{});
    case 4:
      return fn(std::integral_constant<Index, 4>{});
    case 5:
      return fn(std::integral_constant<Index, 5>{});
    case 6:
      return fn(std::integral_constant<Index, 6>{});
    case 7:
      return fn(std::integral_constant<Index, 7>{});
    case 8:
      return fn(std::integral_constant<Index, 8>{});
    default:
      return fn(std::integral_constant<Index, 0>{});
  }
}
static_assert(kMaxFixedFeatures == 8, "with_features lists the fixed sizes");

template <typename Fn>
EACGM_ALWAYS_INLINE void with_shape(Index d, bool full, Fn&& fn) {
  with_features(d, [&](auto D) EACGM_LAMBDA_ALWAYS_INLINE {
    if (full) {
      fn(D, std::true_type{});
    } else {
      fn(D, std::false_type{});
    }
  });
}

// Loads samples [i, i + kLanes) (fewer at the end of the range: the last one is repeated and its
// copies get a zero in `mask`). Returns how many are real.
template <Index D>
EACGM_ALWAYS_INLINE Index load_group(const Samples& s, Index i, Index end, vd* xs, vd& mask) {
  const Index d = D > 0 ? D : s.d;
  const Index n = std::min(kLanes, end - i);
  if (n == kLanes) {
#pragma GCC unroll 8
    for (Index j = 0; j < d; ++j) load(xs[j], s.x + j * s.ld + i);
    mask = EACGM_SPLAT(1.0);
    return n;
  }
  for (Index j = 0; j < d; ++j) {
    for (Index t = 0; t < kLanes; ++t) xs[j][t] = s.x[j * s.ld + i + std::min(t, n - 1)];
  }
  for (Index t = 0; t < kLanes; ++t) mask[t] = t < n ? 1.0 : 0.0;
  return n;
}

// diff := x − μ_c and the squared Mahalanobis distance |L_c⁻¹ (x − μ_c)|².
template <Index D, bool Full>
EACGM_ALWAYS_INLINE void component_distance(const KernelModel& m, Index c, const vd* xs, vd* diff,
                                            vd& maha2) {
  const Index d = D > 0 ? D : m.d;
  const double* mu = &m.means[c * d];
#pragma GCC unroll 8
  for (Index j = 0; j < d; ++j) diff[j] = xs[j] - mu[j];
  vd acc = EACGM_SPLAT(0.0);
  if constexpr (Full) {
    // Row j of L⁻¹ (x − μ) involves features 0..j only: L⁻¹ is lower triangular.
    const double* inv = &m.inverse[c * d * d];
#pragma GCC unroll 8
    for (Index j = 0; j < d; ++j) {
      const double* row = inv + j * d;
      vd z = diff[0] * row[0];
#pragma GCC unroll 8
      for (Index l = 1; l <= j; ++l) z += diff[l] * row[l];
      acc += z * z;
    }
  } else {
    const double* inv = &m.inverse[c * d];
#pragma GCC unroll 8
    for (Index j = 0; j < d; ++j) {
      const vd z = diff[j] * inv[j];
      acc += z * z;
    }
  }
  maha2 = acc;
}

// Per group: logp[c] = log w_c N(x | c) for every component, their maximum, and
// e[c] = exp(logp[c] − max), sum = Σ e: then log p(x) = max + log(sum), r_c = e[c] / sum.
struct GroupScratch {
  GroupScratch(Index k, Index d)
      : xs(static_cast<std::size_t>(d)),
        diff(static_cast<std::size_t>(k * d)),
        maha2(static_cast<std::size_t>(k)),
        e(static_cast<std::size_t>(k)) {}
  Lanes xs, diff, maha2, e;  // e holds logp until exponentiated
};

// diff (k × d vectors, g.diff unless given) receives x − μ_c for every component.
template <Index D, bool Full>
EACGM_ALWAYS_INLINE void group_log_prob(const KernelModel& m, GroupScratch& g, vd& max,
                                        vd* diff = nullptr) {
  const Index d = D > 0 ? D : m.d;
  if (diff == nullptr) diff = g.diff.data();
  for (Index c = 0; c < m.k; ++c) {
    component_distance<D, Full>(m, c, g.xs.data(), diff + c * d, g.maha2[c]);
    g.e[c] = g.maha2[c] * -0.5 + m.log_norm[c];
  }
  max = g.e[0];
  for (Index c = 1; c < m.k; ++c) max = g.e[c] > max ? g.e[c] : max;
}

// e[c] := exp(logp[c] − max), sum := Σ e[c].
EACGM_ALWAYS_INLINE void group_exp(const KernelModel& m, GroupScratch& g, const vd& max, vd& sum) {
  sum = EACGM_SPLAT(0.0);
  for (Index c = 0; c < m.k; ++c) {
    g.e[c] -= max;
    exp_nonpositive(g.e[c]);
    sum += g.e[c];
  }
}

// log p(x) = max + log(sum).
EACGM_ALWAYS_INLINE void group_log_likelihood(const vd& max, const vd& sum, vd& lse) {
  lse = sum;
  log_positive(lse);
  lse += max;
  // Infinitely far from every component (|x| near the double range): −inf, not NaN.
  constexpr double kNegInf = -std::numeric_limits<double>::infinity();
  lse = max == kNegInf ? EACGM_SPLAT(kNegInf) : lse;
}

template <Index D, bool Full>
EACGM_ALWAYS_INLINE void score_impl(const KernelModel& m, const Samples& s, Index begin, Index end,
                                    const ScoreOutputs& out) {
  GroupScratch g(m.k, m.d);
  vd mask{}, max{}, sum{}, lse{};
  for (Index i = begin; i < end; i += kLanes) {
    const Index n = load_group<D>(s, i, end, g.xs.data(), mask);
    group_log_prob<D, Full>(m, g, max);
    // The most likely component before e[] is overwritten (the first one on ties).
    vd best = g.e[0], best_k = EACGM_SPLAT(0.0), best_m = g.maha2[0];
    for (Index c = 1; c < m.k; ++c) {
      const vl better = g.e[c] > best;
      best_k = better ? EACGM_SPLAT(static_cast<double>(c)) : best_k;
      best_m = better ? g.maha2[c] : best_m;
      best = better ? g.e[c] : best;
    }
    group_exp(m, g, max, sum);
    group_log_likelihood(max, sum, lse);
    for (Index t = 0; t < n; ++t) {
      if (out.log_likelihood) out.log_likelihood[i + t] = lse[t];
      if (out.component) out.component[i + t] = static_cast<int>(best_k[t]);
      if (out.mahalanobis) out.mahalanobis[i + t] = std::sqrt(best_m[t]);
    }
    if (out.resp) {
      const vd inv = 1.0 / sum;
      for (Index c = 0; c < m.k; ++c) {
        const vd r = g.e[c] * inv;
        for (Index t = 0; t < n; ++t) out.resp[c * out.ld + i + t] = r[t];
      }
    }
    if (out.mahalanobis_all) {
      for (Index c = 0; c < m.k; ++c) {
        for (Index t = 0; t < n; ++t) {
          out.mahalanobis_all[c * out.ld + i + t] = std::sqrt(g.maha2[c][t]);
        }
      }
    }
  }
}

// Adds responsibility-weighted sums over `n_groups` groups to a (one component's stride): r are
// the groups' responsibilities for the component, diff their x − μ (d vectors per group, groups
// `diff_step` vectors apart). The sums stay in registers over the groups (with D fixed) and go to
// memory once.
template <Index D, bool Full>
EACGM_ALWAYS_INLINE void accumulate_component(Index d, Index n_groups, const vd* r, const vd* diff,
                                              Index diff_step, vd* a) {
  constexpr Index kFixedStride = D > 0 ? 1 + D + (Full ? D * (D + 1) / 2 : D) : 1;
  vd local[kFixedStride];
  vd* sums = a;  // any d: straight to memory
  if constexpr (D > 0) {
#pragma GCC unroll 64
    for (Index t = 0; t < kFixedStride; ++t) local[t] = EACGM_SPLAT(0.0);
    sums = local;
  }
  vd* s1 = sums + 1;
  vd* s2 = sums + 1 + d;
  for (Index g = 0; g < n_groups; ++g, diff += diff_step) {
    const vd rg = r[g];
    sums[0] += rg;
#pragma GCC unroll 8
    for (Index j = 0; j < d; ++j) {
      const vd rd = rg * diff[j];
      s1[j] += rd;
      if constexpr (Full) {
        vd* row = s2 + j * (j + 1) / 2;
#pragma GCC unroll 8
        for (Index l = 0; l <= j; ++l) row[l] += rd * diff[l];
      } else {
        s2[j] += rd * diff[j];
      }
    }
  }
  if constexpr (D > 0) {
#pragma GCC unroll 64
    for (Index t = 0; t < kFixedStride; ++t) a[t] += local[t];
  }
}

template <Index D, bool Full>
EACGM_ALWAYS_INLINE double em_stats_impl(const KernelModel& m, const Samples& s, Index begin,
                                         Index end, double* stats) {
  const Index d = D > 0 ? D : m.d;
  const Index k = m.k;
  const Index stride = em_stats_stride(m);
  // Blocks of groups: the E-step for all of them (responsibilities and x − μ kept), then the sums
  // component by component, so that each component's sums stay in registers over the block.
  constexpr Index kBlockGroups = 16;
  GroupScratch g(k, d);
  Lanes resp(static_cast<std::size_t>(k * kBlockGroups));
  Lanes diffs(static_cast<std::size_t>(kBlockGroups * k * d));
  Lanes acc(static_cast<std::size_t>(k * stride));
  // Σ log p(x) = Σ max + Σ log(sum), and the sums (each in [1, k]) of a block are multiplied
  // together before one log: a sixteenth of the logs, for a few roundings of the product.
  vd log_lik = EACGM_SPLAT(0.0);
  vd mask{}, max{}, sum{};
  for (Index block = begin; block < end; block += kBlockGroups * kLanes) {
    const Index block_end = std::min(end, block + kBlockGroups * kLanes);
    vd product = EACGM_SPLAT(1.0);
    Index n_groups = 0;
    for (Index i = block; i < block_end; i += kLanes, ++n_groups) {
      load_group<D>(s, i, block_end, g.xs.data(), mask);
      group_log_prob<D, Full>(m, g, max, &diffs[n_groups * k * d]);
      group_exp(m, g, max, sum);
      const vl real = mask != 0.0;  // padding lanes get no weight
      log_lik += real ? max : EACGM_SPLAT(0.0);
      product *= real ? sum : EACGM_SPLAT(1.0);
      const vd inv = mask / sum;
      for (Index c = 0; c < k; ++c) resp[c * kBlockGroups + n_groups] = g.e[c] * inv;
    }
    log_positive(product);
    log_lik += product;
    for (Index c = 0; c < k; ++c) {
      accumulate_component<D, Full>(d, n_groups, &resp[c * kBlockGroups], &diffs[c * d], k * d,
                                    &acc[c * stride]);
    }
  }
  for (std::size_t t = 0; t < acc.size(); ++t) stats[t] += lane_sum(acc[t]);
  return lane_sum(log_lik);
}

template <Index D>
EACGM_ALWAYS_INLINE void nearest_impl(const double* centers, Index k, const Samples& s, Index begin,
                                      Index end, int* labels, double* distances) {
  const Index d = D > 0 ? D : s.d;
  Lanes xs(static_cast<std::size_t>(d));
  vd mask{};
  for (Index i = begin; i < end; i += kLanes) {
    const Index n = load_group<D>(s, i, end, xs.data(), mask);
    vd best = EACGM_SPLAT(std::numeric_limits<double>::infinity());
    vd best_k = EACGM_SPLAT(0.0);
    for (Index c = 0; c < k; ++c) {
      const double* center = centers + c * d;
      vd dist = EACGM_SPLAT(0.0);
#pragma GCC unroll 8
      for (Index j = 0; j < d; ++j) {
        const vd t = xs[j] - center[j];
        dist += t * t;
      }
      const vl closer = dist < best;
      best_k = closer ? EACGM_SPLAT(static_cast<double>(c)) : best_k;
      best = closer ? dist : best;
    }
    for (Index t = 0; t < n; ++t) {
      labels[i - begin + t] = static_cast<int>(best_k[t]);
      distances[i - begin + t] = best[t];
    }
  }
}

}  // namespace

Index em_stats_stride(const KernelModel& m) {
  return 1 + m.d + (m.full ? m.d * (m.d + 1) / 2 : m.d);
}

// The entry points, each compiled twice (AVX2 and baseline x86-64) and chosen at load time.
__attribute__((target_clones("arch=x86-64-v4", "avx2", "default"))) void score_range(
    const KernelModel& m, const Samples& s, Index begin, Index end, const ScoreOutputs& out) {
  with_shape(m.d, m.full, [&](auto D, auto full) EACGM_LAMBDA_ALWAYS_INLINE {
    score_impl<D(), full()>(m, s, begin, end, out);
  });
}

__attribute__((target_clones("arch=x86-64-v4", "avx2", "default"))) double em_stats_range(
    const KernelModel& m, const Samples& s, Index begin, Index end, double* stats) {
  double log_lik = 0;
  with_shape(m.d, m.full, [&](auto D, auto full) EACGM_LAMBDA_ALWAYS_INLINE {
    log_lik = em_stats_impl<D(), full()>(m, s, begin, end, stats);
  });
  return log_lik;
}

__attribute__((target_clones("arch=x86-64-v4", "avx2", "default"))) void nearest_center_range(
    const double* centers, Index k, const Samples& s, Index begin, Index end, int* labels,
    double* distances) {
  with_features(s.d, [&](auto D) EACGM_LAMBDA_ALWAYS_INLINE {
    nearest_impl<D()>(centers, k, s, begin, end, labels, distances);
  });
}

}  // namespace eacgm::detail
