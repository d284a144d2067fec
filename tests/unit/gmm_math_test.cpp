// The mixture's arithmetic: log-sum-exp, scoring against direct formulas evaluated in long double
// (this also checks the SIMD exp/log of the kernels), a 1-D two-component model whose density,
// responsibilities and distances are known in closed form, and EM on data whose answer is exact.
#include <gtest/gtest.h>

#include <Eigen/LU>
#include <cmath>
#include <limits>
#include <numbers>
#include <random>
#include <vector>

#include "analysis/gmm.h"
#include "analysis/gmm_fit.h"

namespace eacgm {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

TEST(LogSumExp, MatchesTheNaiveFormulaWhereItWorks) {
  const std::vector<double> v = {-1.5, 0.25, 2.0};
  EXPECT_NEAR(log_sum_exp(v), std::log(std::exp(-1.5) + std::exp(0.25) + std::exp(2.0)), 1e-15);
}

TEST(LogSumExp, NeitherOverflowsNorUnderflows) {
  // exp(1000) overflows and exp(-1000) underflows, yet both sums are exact.
  EXPECT_DOUBLE_EQ(log_sum_exp(std::vector<double>{1000, 1000}), 1000 + std::log(2.0));
  EXPECT_DOUBLE_EQ(log_sum_exp(std::vector<double>{-1000, -1000}), -1000 + std::log(2.0));
  EXPECT_DOUBLE_EQ(log_sum_exp(std::vector<double>{-1000, 0}), 0.0);
  EXPECT_DOUBLE_EQ(log_sum_exp(std::vector<double>{1e308, 1e308}), 1e308);  // + log 2: rounded
}

TEST(LogSumExp, EdgeCases) {
  EXPECT_EQ(log_sum_exp(std::vector<double>{}), -kInf);
  EXPECT_EQ(log_sum_exp(std::vector<double>{-kInf, -kInf}), -kInf);
  EXPECT_DOUBLE_EQ(log_sum_exp(std::vector<double>{-kInf, 3.0}), 3.0);
  EXPECT_EQ(log_sum_exp(std::vector<double>{kInf, 1.0}), kInf);
  EXPECT_TRUE(std::isnan(log_sum_exp(std::vector<double>{1.0, std::nan("")})));
}

// log p(x) by the textbook formula, in long double: Σ w_k N(x | μ_k, Σ_k) via Σ⁻¹ and det Σ,
// with the largest term factored out.
long double reference_log_likelihood(const GaussianMixture& m, const Eigen::VectorXd& x) {
  const int d = m.n_features();
  std::vector<long double> terms;
  for (int k = 0; k < m.n_components(); ++k) {
    const Eigen::MatrixXd& cov = m.covariances()[k];
    const Eigen::VectorXd diff = x - m.means().row(k).transpose();
    const long double maha2 = diff.dot(cov.inverse() * diff);
    terms.push_back(std::log(static_cast<long double>(m.weights()[k])) -
                    0.5L * (d * std::log(2 * std::numbers::pi_v<long double>) +
                            std::log(static_cast<long double>(cov.determinant())) + maha2));
  }
  long double max = -INFINITY;
  for (long double t : terms) max = std::max(max, t);
  long double sum = 0;
  for (long double t : terms) sum += std::exp(t - max);
  return max + std::log(sum);
}

GaussianMixture random_model(CovarianceType type, int k, int d, std::mt19937_64& rng) {
  std::normal_distribution<double> normal;
  std::uniform_real_distribution<double> uniform(0.2, 2.0);
  Eigen::VectorXd weights(k);
  Eigen::MatrixXd means(k, d);
  std::vector<Eigen::MatrixXd> covariances;
  for (int c = 0; c < k; ++c) {
    weights[c] = uniform(rng);
    for (int j = 0; j < d; ++j) means(c, j) = 3 * normal(rng);
    Eigen::MatrixXd cov = Eigen::MatrixXd::Zero(d, d);
    if (type == CovarianceType::kFull) {
      Eigen::MatrixXd a(d, d);
      for (int i = 0; i < d * d; ++i) a.data()[i] = normal(rng);
      cov = a * a.transpose() + 0.5 * Eigen::MatrixXd::Identity(d, d);
    } else if (type == CovarianceType::kDiag) {
      for (int j = 0; j < d; ++j) cov(j, j) = uniform(rng);
    } else {
      cov.diagonal().setConstant(uniform(rng));
    }
    covariances.push_back(cov);
  }
  return *GaussianMixture::create(type, weights, means, covariances);
}

TEST(Scoring, MatchesTheTextbookFormula) {
  std::mt19937_64 rng(1);
  std::normal_distribution<double> normal;
  for (CovarianceType type :
       {CovarianceType::kFull, CovarianceType::kDiag, CovarianceType::kSpherical}) {
    // d = 3 and 5 take the fixed-size kernels, d = 11 the general one.
    for (int d : {1, 3, 5, 11}) {
      const GaussianMixture m = random_model(type, 4, d, rng);
      // 37 samples: not a multiple of the SIMD width. Some far out (tiny densities).
      Eigen::MatrixXd X(37, d);
      for (int i = 0; i < X.rows(); ++i) {
        for (int j = 0; j < d; ++j) X(i, j) = normal(rng) * (i % 5 == 0 ? 30 : 3);
      }
      const Eigen::VectorXd ll = m.score_samples(X);
      for (int i = 0; i < X.rows(); ++i) {
        const double expected =
            static_cast<double>(reference_log_likelihood(m, X.row(i).transpose()));
        EXPECT_NEAR(ll[i], expected, 1e-12 * std::max(1.0, std::abs(expected)))
            << covariance_type_name(type) << " d=" << d << " sample " << i;
        EXPECT_NEAR(m.log_likelihood(X.row(i).transpose()), ll[i],
                    1e-12 * std::max(1.0, std::abs(expected)));
      }
      const Eigen::MatrixXd resp = m.predict_proba(X);
      EXPECT_LT((resp.rowwise().sum().array() - 1).abs().maxCoeff(), 1e-14);
    }
  }
}

TEST(Scoring, FarAwaySamplesHaveFiniteLogLikelihood) {
  std::mt19937_64 rng(2);
  const GaussianMixture m = random_model(CovarianceType::kFull, 3, 2, rng);
  Eigen::MatrixXd X(2, 2);
  X << 1e6, -1e6, 1e100, 0;
  const Eigen::VectorXd ll = m.score_samples(X);
  EXPECT_TRUE(std::isfinite(ll[0]));
  EXPECT_LT(ll[0], -1e9);
  EXPECT_LT(ll[1], -1e190);  // no underflow to zero probability, no NaN
  const Eigen::MatrixXd resp = m.predict_proba(X);
  EXPECT_NEAR(resp.row(0).sum(), 1.0, 1e-14);
}

// p(x) = 0.3 N(x | −2, 1) + 0.7 N(x | 3, 4).
TEST(KnownAnswer, OneDimensionTwoComponents) {
  Eigen::VectorXd w(2);
  w << 0.3, 0.7;
  Eigen::MatrixXd mu(2, 1);
  mu << -2, 3;
  std::vector<Eigen::MatrixXd> cov = {Eigen::MatrixXd::Constant(1, 1, 1.0),
                                      Eigen::MatrixXd::Constant(1, 1, 4.0)};
  for (CovarianceType type :
       {CovarianceType::kFull, CovarianceType::kDiag, CovarianceType::kSpherical}) {
    const GaussianMixture m = *GaussianMixture::create(type, w, mu, cov);
    EXPECT_EQ(m.n_parameters(), 1 + 2 + 2);
    Eigen::MatrixXd X(5, 1);
    X << -2, 0, 0.5, 3, 10;
    const GmmSampleScores s = m.score_detailed(X);
    const Eigen::MatrixXd resp = m.predict_proba(X);
    const Eigen::MatrixXd dist = m.mahalanobis(X);
    for (int i = 0; i < X.rows(); ++i) {
      const double x = X(i, 0);
      const double p1 = 0.3 * std::exp(-0.5 * (x + 2) * (x + 2)) / std::sqrt(2 * M_PI);
      const double p2 = 0.7 * std::exp(-0.5 * (x - 3) * (x - 3) / 4) / std::sqrt(2 * M_PI * 4);
      EXPECT_NEAR(s.log_likelihood[i], std::log(p1 + p2), 1e-14) << x;
      EXPECT_NEAR(resp(i, 0), p1 / (p1 + p2), 1e-14) << x;
      EXPECT_NEAR(dist(i, 0), std::abs(x + 2), 1e-14);
      EXPECT_NEAR(dist(i, 1), std::abs(x - 3) / 2, 1e-14);
      EXPECT_EQ(s.component[i], p1 > p2 ? 0 : 1) << x;
      EXPECT_NEAR(s.mahalanobis[i], p1 > p2 ? std::abs(x + 2) : std::abs(x - 3) / 2, 1e-14);
    }
  }
}

// Two clusters so far apart that every responsibility is exactly 0 or 1: EM's fixed point is the
// clusters' own weights, means and (biased) variances plus reg_covar, known exactly.
TEST(KnownAnswer, EmOnSeparatedClustersFindsTheirMoments) {
  Eigen::MatrixXd X(600, 1);
  for (int i = 0; i < 200; ++i) X(i, 0) = -100 + (i % 2 ? 1 : -1);   // mean −100, var 1
  for (int i = 200; i < 600; ++i) X(i, 0) = 100 + (i % 2 ? 2 : -2);  // mean 100, var 4
  for (CovarianceType type :
       {CovarianceType::kFull, CovarianceType::kDiag, CovarianceType::kSpherical}) {
    GmmFitOptions options;
    options.n_components = 2;
    options.covariance_type = type;
    options.reg_covar = 1e-6;
    Result<GmmFit> fit = fit_gmm(X, options);
    ASSERT_TRUE(fit.ok()) << fit.error().message;
    const GaussianMixture& m = fit->model;
    const int lo = m.means()(0, 0) < 0 ? 0 : 1;
    const int hi = 1 - lo;
    EXPECT_NEAR(m.weights()[lo], 1.0 / 3, 1e-12);
    EXPECT_NEAR(m.means()(lo, 0), -100, 1e-12);
    EXPECT_NEAR(m.means()(hi, 0), 100, 1e-12);
    EXPECT_NEAR(m.covariances()[lo](0, 0), 1 + 1e-6, 1e-12);
    EXPECT_NEAR(m.covariances()[hi](0, 0), 4 + 1e-6, 1e-12);
    EXPECT_TRUE(fit->info.converged);
    // The mean log-likelihood of those parameters, in closed form: each cluster's points sit
    // exactly one standard deviation (√(var/(var+reg))) from its mean.
    const double v1 = 1 + 1e-6, v2 = 4 + 1e-6;
    const double expected =
        (200 * (std::log(1.0 / 3) - 0.5 * std::log(2 * M_PI * v1) - 0.5 / v1) +
         400 * (std::log(2.0 / 3) - 0.5 * std::log(2 * M_PI * v2) - 0.5 * 4 / v2)) /
        600;
    EXPECT_NEAR(fit->info.mean_log_likelihood, expected, 1e-12);
    EXPECT_NEAR(fit->info.bic, -2 * 600 * expected + 5 * std::log(600.0), 1e-8);
  }
}

TEST(Create, RejectsBadParameters) {
  Eigen::VectorXd w(1);
  w << 1;
  Eigen::MatrixXd mu = Eigen::MatrixXd::Zero(1, 2);
  Eigen::MatrixXd not_pd(2, 2);
  not_pd << 1, 2, 2, 1;
  auto error = [&](CovarianceType type, Eigen::VectorXd weights, Eigen::MatrixXd cov) {
    Result<GaussianMixture> m = GaussianMixture::create(type, weights, mu, {cov});
    return m.ok() ? std::string() : m.error().message;
  };
  EXPECT_NE(error(CovarianceType::kFull, w, not_pd).find("not positive definite"),
            std::string::npos);
  Eigen::MatrixXd asym(2, 2);
  asym << 1, 0.5, 0, 1;
  EXPECT_NE(error(CovarianceType::kFull, w, asym).find("not symmetric"), std::string::npos);
  EXPECT_NE(error(CovarianceType::kDiag, w, Eigen::MatrixXd::Ones(2, 2)).find("diagonal"),
            std::string::npos);
  Eigen::MatrixXd uneven = Eigen::MatrixXd::Identity(2, 2);
  uneven(1, 1) = 2;
  EXPECT_NE(error(CovarianceType::kSpherical, w, uneven).find("one variance"), std::string::npos);
  EXPECT_NE(error(CovarianceType::kFull, -w, Eigen::MatrixXd::Identity(2, 2)).find("weights"),
            std::string::npos);
  EXPECT_NE(error(CovarianceType::kFull, w, Eigen::MatrixXd::Identity(3, 3)).find("3 × 3"),
            std::string::npos);
  EXPECT_EQ(error(CovarianceType::kFull, w, Eigen::MatrixXd::Identity(2, 2)), "");
}

}  // namespace
}  // namespace eacgm
