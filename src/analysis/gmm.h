// Gaussian mixture models: the density p(x) = Σ_k w_k N(x | μ_k, Σ_k) that the anomaly detection
// scores samples with (seed 001, §3). This header is the model and its scoring; gmm_fit.h learns
// one from data (EM), gmm_io.h saves and loads it as JSON.
//
// Everything is computed in log space from the Cholesky factor of each covariance, Σ = L Lᵀ:
//   log N(x | μ, Σ) = −½ (d log 2π + |L⁻¹(x − μ)|²) − Σ_i log L_ii
// and densities are combined with log-sum-exp, so that no sample underflows to zero probability.
//
// Samples are the rows of an n × d matrix (Eigen's default column-major layout: each feature is
// contiguous, which is what the vectorised kernels want). Scoring large inputs uses several
// threads; results do not depend on how many.
#pragma once

#include <Eigen/Core>
#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace eacgm {

// The shape of each component's covariance (scikit-learn's names).
enum class CovarianceType {
  kFull,       // any symmetric positive definite matrix
  kDiag,       // a diagonal matrix: one variance per feature
  kSpherical,  // σ² I: one variance per component
};

std::string_view covariance_type_name(CovarianceType type);  // "full", "diag", "spherical"
std::optional<CovarianceType> covariance_type_from_name(std::string_view name);

// log(Σ exp(v_i)), exact where the naive formula overflows or underflows: the largest term is
// factored out. −inf for an empty input or when every term is −inf; +inf if any term is +inf.
double log_sum_exp(std::span<const double> values);

// What `score_detailed` returns for every sample.
struct GmmSampleScores {
  Eigen::VectorXd log_likelihood;  // log p(x)
  Eigen::VectorXi component;       // the most likely component: argmax_k w_k N(x | μ_k, Σ_k)
  Eigen::VectorXd mahalanobis;     // √((x − μ_k)ᵀ Σ_k⁻¹ (x − μ_k)) for that component
};

class GaussianMixture {
 public:
  // Checks and prepares a model. `weights` (k) must be positive and finite; they are divided by
  // their sum unless it is 1 within 1e-12. `means` is k × d. `covariances` holds k d × d matrices:
  // symmetric positive definite for kFull, diagonal with positive entries for kDiag, and a positive
  // multiple of the identity for kSpherical. Errors say which component and why.
  static Result<GaussianMixture> create(CovarianceType type, Eigen::VectorXd weights,
                                        Eigen::MatrixXd means,
                                        std::vector<Eigen::MatrixXd> covariances);

  CovarianceType covariance_type() const { return type_; }
  int n_components() const { return static_cast<int>(weights_.size()); }
  int n_features() const { return static_cast<int>(means_.cols()); }
  const Eigen::VectorXd& weights() const { return weights_; }
  const Eigen::MatrixXd& means() const { return means_; }  // k × d
  const std::vector<Eigen::MatrixXd>& covariances() const { return covariances_; }
  // L_k⁻¹ (lower triangular; diagonal unless kFull), where Σ_k = L_k L_kᵀ.
  const Eigen::MatrixXd& inverse_cholesky(int k) const { return inverse_cholesky_[k]; }
  // log w_k − ½ d log 2π − ½ log det Σ_k: the log of the weighted density at the mean.
  const Eigen::VectorXd& log_normalizers() const { return log_normalizers_; }
  // Free parameters, as scikit-learn counts them for BIC: weights (k − 1), means (k d) and
  // covariances (k d(d+1)/2 full, k d diag, k spherical).
  int n_parameters() const;

  // Optional names of the features (from a CSV header); empty when unknown.
  const std::vector<std::string>& feature_names() const { return feature_names_; }
  void set_feature_names(std::vector<std::string> names) { feature_names_ = std::move(names); }

  // Threads used for scoring large inputs; 0 (the default) means every hardware thread.
  void set_threads(int threads) { threads_ = threads; }
  int threads() const { return threads_; }

  // Scoring. X is n × d with d == n_features() (checked by assertion only: callers validate input
  // dimensions, e.g. the CLI reports a mismatched CSV as an error).
  Eigen::VectorXd score_samples(const Eigen::Ref<const Eigen::MatrixXd>& X) const;  // log p(x_i)
  double score(const Eigen::Ref<const Eigen::MatrixXd>& X) const;  // mean log-likelihood
  GmmSampleScores score_detailed(const Eigen::Ref<const Eigen::MatrixXd>& X) const;
  // Responsibilities p(k | x_i), n × k; each row sums to 1.
  Eigen::MatrixXd predict_proba(const Eigen::Ref<const Eigen::MatrixXd>& X) const;
  // Mahalanobis distance from every sample to every component, n × k.
  Eigen::MatrixXd mahalanobis(const Eigen::Ref<const Eigen::MatrixXd>& X) const;
  // Bayesian and Akaike information criteria on X (lower is better):
  // BIC = −2 n score(X) + n_parameters() log n, AIC = −2 n score(X) + 2 n_parameters().
  double bic(const Eigen::Ref<const Eigen::MatrixXd>& X) const;
  double aic(const Eigen::Ref<const Eigen::MatrixXd>& X) const;

  // One sample (length d), for online use.
  double log_likelihood(const Eigen::Ref<const Eigen::VectorXd>& x) const;

 private:
  GaussianMixture() = default;

  CovarianceType type_ = CovarianceType::kFull;
  Eigen::VectorXd weights_;
  Eigen::MatrixXd means_;
  std::vector<Eigen::MatrixXd> covariances_;
  std::vector<Eigen::MatrixXd> inverse_cholesky_;
  Eigen::VectorXd log_normalizers_;
  std::vector<std::string> feature_names_;
  int threads_ = 0;
};

}  // namespace eacgm
