// Learning a Gaussian mixture from data: expectation-maximisation with scikit-learn's semantics
// (GaussianMixture 1.2), so that results can be checked against it.
//
// - Initialisation: k-means++ seeding (greedy, 2 + ⌊ln k⌋ candidates per centre) then Lloyd's
//   k-means; the hard assignment gives the first weights, means and covariances (one M-step).
//   By default several such starts are screened by a short EM on a subsample and the best is kept
//   (init_candidates). Or start from given parameters (`init`), as sklearn's weights_init,
//   means_init and precisions_init.
// - Each iteration is an E-step (responsibilities and the mean log-likelihood under the current
//   parameters, the "lower bound") and an M-step; `reg_covar` is added to every covariance's
//   diagonal. EM stops when the lower bound changes by less than `tol`, or after `max_iter`.
// - `n_init` restarts from different seeds; the one with the best final lower bound is kept.
// - Deterministic for a seed, whatever the number of threads: partial sums are kept per
//   fixed-size chunk of samples and added in chunk order.
#pragma once

#include <Eigen/Core>
#include <cstdint>
#include <optional>
#include <vector>

#include "analysis/gmm.h"
#include "common/result.h"

namespace eacgm {

struct GmmFitOptions {
  int n_components = 1;
  CovarianceType covariance_type = CovarianceType::kFull;
  double tol = 1e-3;        // on the change of the mean log-likelihood between iterations
  double reg_covar = 1e-6;  // added to the diagonal of every covariance
  int max_iter = 100;       // EM iterations per restart
  int n_init = 1;           // restarts, each from its own k-means++ initialisation
  // Starts screened per restart: each is k-means++ and Lloyd followed by 10 EM iterations on a
  // subsample of at most 8192 samples, and the best lower bound wins. 1: a single k-means start
  // on all the samples, as scikit-learn does.
  int init_candidates = 8;
  std::uint64_t seed = 0;
  int threads = 0;  // 0: every hardware thread
  // Start EM from these parameters instead of k-means (n_init is then 1). Its number of
  // components and covariance type must match the options'. Not owned; null: k-means.
  const GaussianMixture* init = nullptr;
};

struct GmmFitInfo {
  int n_iter = 0;          // EM iterations of the kept restart
  bool converged = false;  // whether it stopped on `tol` rather than `max_iter`
  double lower_bound = 0;  // its last E-step's mean log-likelihood (sklearn's lower_bound_)
  int best_init = 0;       // which restart was kept (0-based)
  int failed_inits = 0;    // restarts abandoned because a covariance became singular
  Eigen::Index n_samples = 0;
  double mean_log_likelihood = 0;  // of the final parameters on the training data
  double bic = 0;                  // of the final parameters on the training data
  // With fit_gmm_select_k: (k, BIC) for every k tried; a k whose fit failed is left out.
  std::vector<std::pair<int, double>> bic_by_k;
};

struct GmmFit {
  GaussianMixture model;
  GmmFitInfo info;
};

// Fits a mixture to the rows of X (n × d, n ≥ n_components). Fails on bad options, on too few
// samples, or when every restart ended with a covariance that is not positive definite (a
// collapsed component: fewer components or a larger reg_covar help).
Result<GmmFit> fit_gmm(const Eigen::Ref<const Eigen::MatrixXd>& X, const GmmFitOptions& options);

// Fits k = k_min..k_max components (capped at the number of samples) and keeps the fit with the
// lowest BIC. options.n_components and options.init are ignored.
Result<GmmFit> fit_gmm_select_k(const Eigen::Ref<const Eigen::MatrixXd>& X,
                                const GmmFitOptions& options, int k_min = 1, int k_max = 10);

// k-means++ seeding and Lloyd iterations (exposed for tests and for other detectors).
struct KMeansResult {
  Eigen::MatrixXd centers;  // k × d
  Eigen::VectorXi labels;   // n: the nearest centre of every sample
  int n_iter = 0;
  double inertia = 0;  // Σ squared distance to the nearest centre
};
// Stops when no label changes or the centres move by at most tol × the mean feature variance
// (sum of squared shifts, sklearn's KMeans criterion), or after max_iter iterations.
Result<KMeansResult> kmeans(const Eigen::Ref<const Eigen::MatrixXd>& X, int k, std::uint64_t seed,
                            int max_iter = 300, double tol = 1e-4, int threads = 0);

}  // namespace eacgm
