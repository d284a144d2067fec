#include "analysis/gmm_fit.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "analysis/gmm_kernels.h"
#include "analysis/parallel.h"
#include "analysis/random.h"

namespace eacgm {
namespace {

using detail::kGmmChunk;
using Eigen::Index;

constexpr double kEps = std::numeric_limits<double>::epsilon();
// Screening several starts (GmmFitOptions::init_candidates): EM iterations per candidate, and the
// most samples they run on.
constexpr int kScreenIterations = 10;
constexpr Index kScreenSamples = 8192;

std::size_t chunk_count(Index n) {
  return static_cast<std::size_t>((n + kGmmChunk - 1) / kGmmChunk);
}

// ---------------------------------------------------------------------------------------------
// k-means
// ---------------------------------------------------------------------------------------------

// Squared distance from every sample to `center` (length d).
Eigen::ArrayXd squared_distances(const Eigen::Ref<const Eigen::MatrixXd>& X,
                                 const Eigen::RowVectorXd& center) {
  Eigen::ArrayXd d2 = (X.col(0).array() - center[0]).square();
  for (Index j = 1; j < X.cols(); ++j) d2 += (X.col(j).array() - center[j]).square();
  return d2;
}

// Greedy k-means++ (Arthur & Vassilvitskii 2007, with several candidates per centre): each new
// centre is the best of 2 + ⌊ln k⌋ samples drawn with probability ∝ squared distance to the
// nearest centre so far, "best" meaning the lowest resulting potential.
Eigen::MatrixXd kmeans_plus_plus(const Eigen::Ref<const Eigen::MatrixXd>& X, int k,
                                 detail::SplitMix64& rng) {
  const Index n = X.rows();
  Eigen::MatrixXd centers(k, X.cols());
  const int n_trials = 2 + static_cast<int>(std::log(static_cast<double>(k)));
  centers.row(0) = X.row(static_cast<Index>(rng.below(static_cast<std::uint64_t>(n))));
  Eigen::ArrayXd closest = squared_distances(X, centers.row(0));
  std::vector<double> cumulative(static_cast<std::size_t>(n));
  for (int c = 1; c < k; ++c) {
    std::partial_sum(closest.begin(), closest.end(), cumulative.begin());
    const double total = cumulative.back();
    Index best = -1;
    double best_potential = std::numeric_limits<double>::infinity();
    Eigen::ArrayXd best_closest;
    for (int t = 0; t < n_trials; ++t) {
      Index candidate;
      if (total > 0) {
        // The first sample whose cumulative weight exceeds the draw: never a zero-weight one.
        const double r = rng.uniform() * total;
        candidate = std::upper_bound(cumulative.begin(), cumulative.end(), r) - cumulative.begin();
        candidate = std::min(candidate, n - 1);
      } else {  // every sample sits on a centre already
        candidate = static_cast<Index>(rng.below(static_cast<std::uint64_t>(n)));
      }
      Eigen::ArrayXd candidate_closest = squared_distances(X, X.row(candidate)).min(closest);
      const double potential = candidate_closest.sum();
      if (best < 0 || potential < best_potential) {
        best_potential = potential;
        best = candidate;
        best_closest = std::move(candidate_closest);
      }
    }
    centers.row(c) = X.row(best);
    closest = std::move(best_closest);
  }
  return centers;
}

// What one Lloyd step computes for a chunk of samples.
struct LloydChunk {
  Eigen::MatrixXd sums;  // k × d
  Eigen::VectorXd counts;
  double inertia = 0;
  Index changed = 0;
};

// Assigns every sample to its nearest centre (labels, distances) and sums the clusters.
void lloyd_assign(const Eigen::Ref<const Eigen::MatrixXd>& X, const Eigen::MatrixXd& centers,
                  Eigen::VectorXi& labels, Eigen::ArrayXd& min_d2, std::vector<LloydChunk>& chunks,
                  int threads) {
  const Index n = X.rows();
  const Index d = X.cols();
  const Index k = centers.rows();
  const Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> rows = centers;
  const detail::Samples samples{X.data(), X.outerStride(), d};
  detail::parallel_for(chunks.size(), threads, [&](std::size_t chunk) {
    LloydChunk& out = chunks[chunk];
    out.sums.setZero(k, d);
    out.counts.setZero(k);
    out.changed = 0;
    const Index begin = static_cast<Index>(chunk) * kGmmChunk;
    const Index end = std::min(n, begin + kGmmChunk);
    std::vector<int> nearest(static_cast<std::size_t>(end - begin));
    detail::nearest_center_range(rows.data(), k, samples, begin, end, nearest.data(),
                                 min_d2.data() + begin);
    for (Index i = begin; i < end; ++i) {
      const int label = nearest[static_cast<std::size_t>(i - begin)];
      if (labels[i] != label) {
        ++out.changed;
        labels[i] = label;
      }
      out.counts[label] += 1;
      for (Index j = 0; j < d; ++j) out.sums(label, j) += X(i, j);
    }
    out.inertia = min_d2.segment(begin, end - begin).sum();
  });
}

}  // namespace

Result<KMeansResult> kmeans(const Eigen::Ref<const Eigen::MatrixXd>& X, int k, std::uint64_t seed,
                            int max_iter, double tol, int threads) {
  const Index n = X.rows();
  const Index d = X.cols();
  if (k < 1) return Error{"k-means needs at least one cluster"};
  if (n < k) return Error{fmt::format("k-means: {} samples for {} clusters", n, k)};
  if (d < 1) return Error{"k-means: no features"};
  if (!X.allFinite()) return Error{"k-means: the data contain a non-finite value"};
  threads = detail::resolve_threads(threads);
  detail::SplitMix64 rng(seed);

  // sklearn's tolerance: relative to the mean variance of the features.
  const Eigen::RowVectorXd mean = X.colwise().mean();
  const double mean_variance =
      (X.rowwise() - mean).array().square().colwise().sum().mean() / static_cast<double>(n);
  const double abs_tol = tol * mean_variance;

  KMeansResult result;
  result.centers = kmeans_plus_plus(X, k, rng);
  result.labels = Eigen::VectorXi::Constant(n, -1);
  Eigen::ArrayXd min_d2(n);
  std::vector<LloydChunk> chunks(chunk_count(n));
  bool settled = false;  // labels match the centres
  for (int it = 1; it <= max_iter; ++it) {
    lloyd_assign(X, result.centers, result.labels, min_d2, chunks, threads);
    Eigen::MatrixXd sums = Eigen::MatrixXd::Zero(k, d);
    Eigen::VectorXd counts = Eigen::VectorXd::Zero(k);
    Index changed = 0;
    for (const LloydChunk& c : chunks) {
      sums += c.sums;
      counts += c.counts;
      changed += c.changed;
    }
    result.n_iter = it;
    if (changed == 0) {  // the centres are the means of their clusters already
      settled = true;
      break;
    }
    // An empty cluster takes the sample farthest from its own centre (sklearn does the same),
    // from a cluster that keeps at least one sample.
    for (Index c = 0; c < k; ++c) {
      if (counts[c] > 0) continue;
      Index far = 0;
      while (min_d2.maxCoeff(&far) >= 0 && counts[result.labels[far]] <= 1) min_d2[far] = -1;
      if (min_d2[far] < 0) break;  // fewer distinct samples than clusters: leave it empty
      const int from = result.labels[far];
      sums.row(from) -= X.row(far);
      counts[from] -= 1;
      sums.row(c) = X.row(far);
      counts[c] = 1;
      result.labels[far] = static_cast<int>(c);
      min_d2[far] = -1;  // not again
    }
    Eigen::MatrixXd centers = sums.array().colwise() / counts.array().max(1.0);
    for (Index c = 0; c < k; ++c) {
      if (counts[c] == 0) centers.row(c) = result.centers.row(c);  // an empty cluster stays put
    }
    const double shift = (centers - result.centers).squaredNorm();
    result.centers = std::move(centers);
    if (shift <= abs_tol) break;
  }
  if (!settled) lloyd_assign(X, result.centers, result.labels, min_d2, chunks, threads);
  result.inertia = 0;
  for (const LloydChunk& c : chunks) result.inertia += c.inertia;
  return result;
}

namespace {

// ---------------------------------------------------------------------------------------------
// EM
// ---------------------------------------------------------------------------------------------

// Responsibility-weighted sums around a shift per component (the means used in the E-step), so
// that covariances come out as Σ r (x − s)(x − s)ᵀ / n_k − δ δᵀ with a small δ = mean − s: no
// cancellation even when the data sit far from the origin. Layout: em_stats_range's.
struct Stats {
  double log_lik = 0;
  std::vector<double> sums;

  void reset(std::size_t size) {
    log_lik = 0;
    sums.assign(size, 0.0);
  }
  void add(const Stats& o) {
    log_lik += o.log_lik;
    for (std::size_t i = 0; i < sums.size(); ++i) sums[i] += o.sums[i];
  }
};

Index stats_stride(Index d, CovarianceType type) {
  return 1 + d + (type == CovarianceType::kFull ? d * (d + 1) / 2 : d);
}

// The M-step: new parameters from the statistics gathered around `shift` (k × d).
Result<GaussianMixture> m_step(const Eigen::MatrixXd& shift, const Stats& st, CovarianceType type,
                               double reg_covar) {
  const Index k = shift.rows();
  const Index d = shift.cols();
  const Index stride = stats_stride(d, type);
  Eigen::VectorXd nk(k);
  Eigen::MatrixXd means(k, d);
  std::vector<Eigen::MatrixXd> covariances(static_cast<std::size_t>(k));
  for (Index c = 0; c < k; ++c) {
    const double* sums = &st.sums[static_cast<std::size_t>(c * stride)];
    nk[c] = sums[0] + 10 * kEps;  // as sklearn: no division by zero
    const Eigen::Map<const Eigen::VectorXd> s1(sums + 1, d);
    const double* s2 = sums + 1 + d;
    const Eigen::VectorXd delta = s1 / nk[c];
    means.row(c) = shift.row(c) + delta.transpose();
    Eigen::MatrixXd& cov = covariances[static_cast<std::size_t>(c)];
    if (type == CovarianceType::kFull) {
      cov.resize(d, d);
      for (Index j = 0; j < d; ++j) {
        for (Index l = 0; l <= j; ++l) {
          cov(j, l) = s2[j * (j + 1) / 2 + l] / nk[c] - delta[j] * delta[l];
          cov(l, j) = cov(j, l);
        }
        cov(j, j) += reg_covar;
      }
    } else {
      Eigen::VectorXd var(d);
      for (Index j = 0; j < d; ++j) {
        var[j] = std::max(0.0, s2[j] / nk[c] - delta[j] * delta[j]) + reg_covar;
      }
      if (type == CovarianceType::kSpherical) var.setConstant(var.mean());
      cov = var.asDiagonal();
    }
  }
  return GaussianMixture::create(type, nk / nk.sum(), std::move(means), std::move(covariances));
}

// E-step and the M-step's sums in one pass over X. Returns the mean log-likelihood.
double em_pass(const GaussianMixture& model, const Eigen::Ref<const Eigen::MatrixXd>& X,
               std::vector<Stats>& chunks, Stats& total, int threads) {
  const Index n = X.rows();
  const detail::KernelModel kernel(model);
  const detail::Samples samples{X.data(), X.outerStride(), X.cols()};
  const std::size_t size = static_cast<std::size_t>(kernel.k * detail::em_stats_stride(kernel));
  detail::parallel_for(chunks.size(), threads, [&](std::size_t chunk) {
    Stats& st = chunks[chunk];
    st.reset(size);
    const Index begin = static_cast<Index>(chunk) * kGmmChunk;
    st.log_lik = detail::em_stats_range(kernel, samples, begin, std::min(n, begin + kGmmChunk),
                                        st.sums.data());
  });
  total.reset(size);
  for (const Stats& st : chunks) total.add(st);
  return total.log_lik / static_cast<double>(n);
}

// The first parameters from a hard assignment (k-means labels), as sklearn's init_params="kmeans".
Result<GaussianMixture> from_labels(const Eigen::Ref<const Eigen::MatrixXd>& X,
                                    const KMeansResult& km, CovarianceType type, double reg_covar,
                                    int threads) {
  const Index n = X.rows();
  std::vector<Stats> chunks(chunk_count(n));
  const Index d = X.cols();
  const Index k = km.centers.rows();
  const bool full = type == CovarianceType::kFull;
  const Index stride = stats_stride(d, type);
  detail::parallel_for(chunks.size(), threads, [&](std::size_t chunk) {
    Stats& st = chunks[chunk];
    st.reset(static_cast<std::size_t>(k * stride));
    Eigen::VectorXd diff(d);
    const Index chunk_end = std::min(n, static_cast<Index>(chunk + 1) * kGmmChunk);
    for (Index i = static_cast<Index>(chunk) * kGmmChunk; i < chunk_end; ++i) {
      const Index c = km.labels[i];
      for (Index j = 0; j < d; ++j) diff[j] = X(i, j) - km.centers(c, j);
      double* sums = &st.sums[static_cast<std::size_t>(c * stride)];
      sums[0] += 1;
      double* s2 = sums + 1 + d;
      for (Index j = 0; j < d; ++j) {
        sums[1 + j] += diff[j];
        if (full) {
          for (Index l = 0; l <= j; ++l) s2[j * (j + 1) / 2 + l] += diff[j] * diff[l];
        } else {
          s2[j] += diff[j] * diff[j];
        }
      }
    }
  });
  Stats total;
  total.reset(static_cast<std::size_t>(k * stride));
  for (const Stats& st : chunks) total.add(st);
  return m_step(km.centers, total, type, reg_covar);
}

struct EmRun {
  std::optional<GaussianMixture> model;
  int n_iter = 0;
  bool converged = false;
  double lower_bound = -std::numeric_limits<double>::infinity();
};

Result<EmRun> run_em(const Eigen::Ref<const Eigen::MatrixXd>& X, GaussianMixture model,
                     const GmmFitOptions& options, int max_iter, int threads) {
  std::vector<Stats> chunks(chunk_count(X.rows()));
  EmRun run;
  Stats total;
  for (int it = 1; it <= max_iter; ++it) {
    const double previous = run.lower_bound;
    run.lower_bound = em_pass(model, X, chunks, total, threads);
    if (!std::isfinite(run.lower_bound)) {
      return Error{fmt::format("iteration {}: the log-likelihood is not finite", it)};
    }
    Result<GaussianMixture> next =
        m_step(model.means(), total, options.covariance_type, options.reg_covar);
    if (!next) return Error{fmt::format("iteration {}: {}", it, next.error().message)};
    model = std::move(next.value());
    run.n_iter = it;
    if (std::abs(run.lower_bound - previous) < options.tol) {
      run.converged = true;
      break;
    }
  }
  run.model = std::move(model);
  return run;
}

// The k-means start: k-means++ seeding and Lloyd's iterations, then one M-step from the labels.
Result<GaussianMixture> kmeans_start(const Eigen::Ref<const Eigen::MatrixXd>& X,
                                     const GmmFitOptions& options, std::uint64_t seed,
                                     int threads) {
  Result<KMeansResult> km = kmeans(X, options.n_components, seed, 300, 1e-4, threads);
  if (!km) return km.error();
  return from_labels(X, *km, options.covariance_type, options.reg_covar, threads);
}

// The starting parameters of one restart. With several candidates, each is a k-means start
// followed by a few EM iterations on a subsample (all of X when it is small), and the one with
// the best lower bound wins ("short EM", Biernacki, Celeux & Govaert 2003): a single k-means start
// lands in a poor local optimum of the likelihood often enough to matter on overlapping or
// elongated clusters.
Result<GaussianMixture> initial_model(const Eigen::Ref<const Eigen::MatrixXd>& X,
                                      const GmmFitOptions& options, std::uint64_t seed,
                                      int threads) {
  if (options.init_candidates <= 1) return kmeans_start(X, options, seed, threads);
  detail::SplitMix64 rng(seed);
  const Index n = X.rows();
  const Index m = std::max<Index>(std::min<Index>(n, kScreenSamples), options.n_components);
  Eigen::MatrixXd sample;
  if (m < n) {
    // m distinct rows, uniformly (a partial Fisher-Yates shuffle), kept in their order.
    std::vector<Index> rows(static_cast<std::size_t>(n));
    std::iota(rows.begin(), rows.end(), Index{0});
    for (Index i = 0; i < m; ++i) {
      const Index j = i + static_cast<Index>(rng.below(static_cast<std::uint64_t>(n - i)));
      std::swap(rows[static_cast<std::size_t>(i)], rows[static_cast<std::size_t>(j)]);
    }
    std::sort(rows.begin(), rows.begin() + m);
    sample.resize(m, X.cols());
    for (Index i = 0; i < m; ++i) sample.row(i) = X.row(rows[static_cast<std::size_t>(i)]);
  }
  auto screen = [&](const Eigen::Ref<const Eigen::MatrixXd>& S) -> Result<GaussianMixture> {
    std::optional<EmRun> best;
    std::string error;
    for (int c = 0; c < options.init_candidates; ++c) {
      Result<GaussianMixture> start = kmeans_start(S, options, rng.next(), threads);
      if (!start) {
        error = start.error().message;
        continue;
      }
      Result<EmRun> run = run_em(S, std::move(start.value()), options, kScreenIterations, threads);
      if (!run) {
        error = run.error().message;
        continue;
      }
      if (!best || run->lower_bound > best->lower_bound) best = std::move(run.value());
    }
    if (!best) return Error{fmt::format("every candidate start failed ({})", error)};
    return std::move(*best->model);
  };
  return m < n ? screen(sample) : screen(X);
}

}  // namespace

Result<GmmFit> fit_gmm(const Eigen::Ref<const Eigen::MatrixXd>& X, const GmmFitOptions& options) {
  const Index n = X.rows();
  const Index d = X.cols();
  const int k = options.n_components;
  if (k < 1) return Error{fmt::format("number of components must be at least 1, not {}", k)};
  if (d < 1) return Error{"the data have no features"};
  if (n < k) {
    return Error{fmt::format("{} samples are too few for {} components", n, k)};
  }
  if (!(options.tol >= 0)) return Error{"tol must be a non-negative number"};
  if (!(options.reg_covar >= 0) || !std::isfinite(options.reg_covar)) {
    return Error{"reg_covar must be a non-negative number"};
  }
  if (options.max_iter < 1) return Error{"max_iter must be at least 1"};
  if (options.n_init < 1) return Error{"n_init must be at least 1"};
  if (options.init_candidates < 1) return Error{"init_candidates must be at least 1"};
  if (!X.allFinite()) return Error{"the data contain a non-finite value"};
  if (options.init) {
    const GaussianMixture& init = *options.init;
    if (init.n_components() != k || init.covariance_type() != options.covariance_type ||
        init.n_features() != d) {
      return Error{fmt::format(
          "the initial model ({} {} components over {} features) does not match the fit ({} {} "
          "components over {} features)",
          init.n_components(), covariance_type_name(init.covariance_type()), init.n_features(), k,
          covariance_type_name(options.covariance_type), d)};
    }
  }

  const int threads = detail::resolve_threads(options.threads);
  detail::SplitMix64 seeds(options.seed);
  const int n_init = options.init ? 1 : options.n_init;
  std::optional<GmmFit> best;
  std::string last_error;
  int failed = 0;
  for (int i = 0; i < n_init; ++i) {
    const std::uint64_t seed = seeds.next();
    std::optional<GaussianMixture> start;
    if (options.init) {
      start = *options.init;
    } else {
      Result<GaussianMixture> first = initial_model(X, options, seed, threads);
      if (!first) {
        ++failed;
        last_error = fmt::format("initialisation: {}", first.error().message);
        continue;
      }
      start = std::move(first.value());
    }
    Result<EmRun> run = run_em(X, std::move(*start), options, options.max_iter, threads);
    if (!run) {
      ++failed;
      last_error = run.error().message;
      continue;
    }
    if (!best || run->lower_bound > best->info.lower_bound) {
      GmmFitInfo info;
      info.n_iter = run->n_iter;
      info.converged = run->converged;
      info.lower_bound = run->lower_bound;
      info.best_init = i;
      best.emplace(GmmFit{std::move(*run->model), info});
    }
  }
  if (!best) {
    return Error{fmt::format(
        "fitting {} {} components failed ({}): a component collapsed onto too few distinct "
        "samples; try fewer components or a larger reg_covar",
        k, covariance_type_name(options.covariance_type), last_error)};
  }
  best->info.failed_inits = failed;
  best->info.n_samples = n;
  best->model.set_threads(options.threads);
  best->info.mean_log_likelihood = best->model.score(X);
  best->info.bic = -2 * best->info.mean_log_likelihood * static_cast<double>(n) +
                   best->model.n_parameters() * std::log(static_cast<double>(n));
  return std::move(*best);
}

Result<GmmFit> fit_gmm_select_k(const Eigen::Ref<const Eigen::MatrixXd>& X,
                                const GmmFitOptions& options, int k_min, int k_max) {
  if (k_min < 1 || k_max < k_min) {
    return Error{fmt::format("bad range of components {}..{}", k_min, k_max)};
  }
  k_max = static_cast<int>(std::min<Index>(k_max, X.rows()));
  if (k_max < k_min) {
    return Error{fmt::format("{} samples are too few for {} components", X.rows(), k_min)};
  }
  GmmFitOptions opts = options;
  opts.init = nullptr;
  std::optional<GmmFit> best;
  std::vector<std::pair<int, double>> bic_by_k;
  std::string errors;
  for (int k = k_min; k <= k_max; ++k) {
    opts.n_components = k;
    Result<GmmFit> fit = fit_gmm(X, opts);
    if (!fit) {
      errors += fmt::format("{}k={}: {}", errors.empty() ? "" : "; ", k, fit.error().message);
      continue;
    }
    bic_by_k.emplace_back(k, fit->info.bic);
    if (!best || fit->info.bic < best->info.bic) best = std::move(fit.value());
  }
  if (!best) return Error{errors};
  best->info.bic_by_k = std::move(bic_by_k);
  return std::move(*best);
}

}  // namespace eacgm
