#include "analysis/gmm.h"

#include <fmt/format.h>

#include <Eigen/Cholesky>
#include <algorithm>
#include <cassert>
#include <cmath>
#include <limits>
#include <numbers>

#include "analysis/gmm_kernels.h"
#include "analysis/parallel.h"

namespace eacgm {

using Eigen::Index;

std::string_view covariance_type_name(CovarianceType type) {
  switch (type) {
    case CovarianceType::kFull:
      return "full";
    case CovarianceType::kDiag:
      return "diag";
    case CovarianceType::kSpherical:
      return "spherical";
  }
  return "full";
}

std::optional<CovarianceType> covariance_type_from_name(std::string_view name) {
  if (name == "full") return CovarianceType::kFull;
  if (name == "diag") return CovarianceType::kDiag;
  if (name == "spherical") return CovarianceType::kSpherical;
  return std::nullopt;
}

double log_sum_exp(std::span<const double> values) {
  double max = -std::numeric_limits<double>::infinity();
  for (double v : values) {
    if (std::isnan(v)) return v;
    max = std::max(max, v);
  }
  if (!std::isfinite(max)) return max;  // empty, all −inf, or some +inf
  double sum = 0;
  for (double v : values) sum += std::exp(v - max);
  return max + std::log(sum);
}

Result<GaussianMixture> GaussianMixture::create(CovarianceType type, Eigen::VectorXd weights,
                                                Eigen::MatrixXd means,
                                                std::vector<Eigen::MatrixXd> covariances) {
  const Index k = weights.size();
  const Index d = means.cols();
  if (k < 1) return Error{"a mixture needs at least one component"};
  if (d < 1) return Error{"a mixture needs at least one feature"};
  if (means.rows() != k) {
    return Error{fmt::format("{} weights but {} means", k, means.rows())};
  }
  if (static_cast<Index>(covariances.size()) != k) {
    return Error{fmt::format("{} weights but {} covariances", k, covariances.size())};
  }
  if (!weights.allFinite() || (weights.array() <= 0).any()) {
    return Error{"weights must be positive finite numbers"};
  }
  if (!means.allFinite()) return Error{"means must be finite numbers"};

  GaussianMixture m;
  m.type_ = type;
  // Normalised, unless they are already (so that a saved model loads back bit for bit).
  const double total = weights.sum();
  m.weights_ = std::abs(total - 1) <= 1e-12 ? std::move(weights) : Eigen::VectorXd(weights / total);
  m.means_ = std::move(means);
  m.inverse_cholesky_.resize(k);
  m.log_normalizers_.resize(k);
  const double log_2pi = std::log(2 * std::numbers::pi);
  for (Index c = 0; c < k; ++c) {
    const Eigen::MatrixXd& cov = covariances[c];
    if (cov.rows() != d || cov.cols() != d) {
      return Error{fmt::format("component {}: covariance is {} × {}, expected {} × {}", c,
                               cov.rows(), cov.cols(), d, d)};
    }
    if (!cov.allFinite()) {
      return Error{fmt::format("component {}: covariance has a non-finite entry", c)};
    }
    Eigen::MatrixXd& inv = m.inverse_cholesky_[c];
    if (type == CovarianceType::kFull) {
      if (!cov.isApprox(cov.transpose(), 1e-10)) {
        return Error{fmt::format("component {}: covariance is not symmetric", c)};
      }
      const Eigen::LLT<Eigen::MatrixXd> llt(cov);
      const Eigen::MatrixXd L = llt.matrixL();
      if (llt.info() != Eigen::Success || !L.allFinite() || (L.diagonal().array() <= 0).any()) {
        return Error{fmt::format("component {}: covariance is not positive definite", c)};
      }
      inv = L.triangularView<Eigen::Lower>().solve(Eigen::MatrixXd::Identity(d, d));
    } else {
      const bool diagonal = (cov - Eigen::MatrixXd(cov.diagonal().asDiagonal())).isZero(0);
      if (!diagonal) {
        return Error{fmt::format("component {}: a {} covariance must be diagonal", c,
                                 covariance_type_name(type))};
      }
      if ((cov.diagonal().array() <= 0).any()) {
        return Error{fmt::format("component {}: variances must be positive", c)};
      }
      if (type == CovarianceType::kSpherical && (cov.diagonal().array() != cov(0, 0)).any()) {
        return Error{fmt::format("component {}: a spherical covariance has one variance", c)};
      }
      inv = Eigen::MatrixXd::Zero(d, d);
      inv.diagonal() = cov.diagonal().array().sqrt().inverse();
    }
    if (!inv.allFinite()) {
      return Error{fmt::format("component {}: covariance is not invertible", c)};
    }
    // log det Σ = 2 Σ log L_ii = −2 Σ log (L⁻¹)_ii
    const double half_log_det_precision = inv.diagonal().array().log().sum();
    m.log_normalizers_[c] =
        std::log(m.weights_[c]) - 0.5 * static_cast<double>(d) * log_2pi + half_log_det_precision;
  }
  m.covariances_ = std::move(covariances);
  return m;
}

int GaussianMixture::n_parameters() const {
  const int k = n_components();
  const int d = n_features();
  int cov = 0;
  switch (type_) {
    case CovarianceType::kFull:
      cov = k * d * (d + 1) / 2;
      break;
    case CovarianceType::kDiag:
      cov = k * d;
      break;
    case CovarianceType::kSpherical:
      cov = k;
      break;
  }
  return cov + k * d + k - 1;
}

namespace {

// Runs score_range over X in parallel chunks of samples.
void score_parallel(const GaussianMixture& m, const Eigen::Ref<const Eigen::MatrixXd>& X,
                    const detail::ScoreOutputs& out) {
  assert(X.cols() == m.n_features());
  const detail::KernelModel kernel(m);
  const detail::Samples samples{X.data(), X.outerStride(), X.cols()};
  const Index n = X.rows();
  const std::size_t n_chunks =
      static_cast<std::size_t>((n + detail::kGmmChunk - 1) / detail::kGmmChunk);
  detail::parallel_for(n_chunks, detail::resolve_threads(m.threads()), [&](std::size_t chunk) {
    const Index begin = static_cast<Index>(chunk) * detail::kGmmChunk;
    detail::score_range(kernel, samples, begin, std::min(n, begin + detail::kGmmChunk), out);
  });
}

}  // namespace

Eigen::VectorXd GaussianMixture::score_samples(const Eigen::Ref<const Eigen::MatrixXd>& X) const {
  Eigen::VectorXd out(X.rows());
  detail::ScoreOutputs outputs;
  outputs.log_likelihood = out.data();
  score_parallel(*this, X, outputs);
  return out;
}

double GaussianMixture::score(const Eigen::Ref<const Eigen::MatrixXd>& X) const {
  if (X.rows() == 0) return std::numeric_limits<double>::quiet_NaN();
  return score_samples(X).mean();
}

GmmSampleScores GaussianMixture::score_detailed(const Eigen::Ref<const Eigen::MatrixXd>& X) const {
  GmmSampleScores out;
  out.log_likelihood.resize(X.rows());
  out.component.resize(X.rows());
  out.mahalanobis.resize(X.rows());
  detail::ScoreOutputs outputs;
  outputs.log_likelihood = out.log_likelihood.data();
  outputs.component = out.component.data();
  outputs.mahalanobis = out.mahalanobis.data();
  score_parallel(*this, X, outputs);
  return out;
}

Eigen::MatrixXd GaussianMixture::predict_proba(const Eigen::Ref<const Eigen::MatrixXd>& X) const {
  Eigen::MatrixXd out(X.rows(), n_components());
  detail::ScoreOutputs outputs;
  outputs.resp = out.data();
  outputs.ld = X.rows();
  score_parallel(*this, X, outputs);
  return out;
}

Eigen::MatrixXd GaussianMixture::mahalanobis(const Eigen::Ref<const Eigen::MatrixXd>& X) const {
  Eigen::MatrixXd out(X.rows(), n_components());
  detail::ScoreOutputs outputs;
  outputs.mahalanobis_all = out.data();
  outputs.ld = X.rows();
  score_parallel(*this, X, outputs);
  return out;
}

double GaussianMixture::bic(const Eigen::Ref<const Eigen::MatrixXd>& X) const {
  const double n = static_cast<double>(X.rows());
  return -2 * score(X) * n + n_parameters() * std::log(n);
}

double GaussianMixture::aic(const Eigen::Ref<const Eigen::MatrixXd>& X) const {
  const double n = static_cast<double>(X.rows());
  return -2 * score(X) * n + 2 * n_parameters();
}

double GaussianMixture::log_likelihood(const Eigen::Ref<const Eigen::VectorXd>& x) const {
  assert(x.size() == n_features());
  std::vector<double> terms(static_cast<std::size_t>(n_components()));
  for (int k = 0; k < n_components(); ++k) {
    const Eigen::VectorXd z =
        inverse_cholesky_[k].triangularView<Eigen::Lower>() * (x - means_.row(k).transpose());
    terms[static_cast<std::size_t>(k)] = log_normalizers_[k] - 0.5 * z.squaredNorm();
  }
  return log_sum_exp(terms);
}

}  // namespace eacgm
