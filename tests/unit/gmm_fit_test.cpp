// EM and its initialisation: one iteration from given parameters equals a direct implementation
// of the E- and M-steps, BIC finds the true number of components, results depend on the seed and
// not on the number of threads, restarts keep the best lower bound, and bad requests fail cleanly.
#include "analysis/gmm_fit.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <set>

#include "analysis/gmm.h"

namespace eacgm {
namespace {

// n samples from well separated 2-D clusters (centres on a circle of radius 20).
Eigen::MatrixXd clusters(int k, int n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal;
  Eigen::MatrixXd X(n, 2);
  for (int i = 0; i < n; ++i) {
    const int c = i % k;
    X(i, 0) = 20 * std::cos(2 * M_PI * c / k) + normal(rng) * (1 + 0.3 * c);
    X(i, 1) = 20 * std::sin(2 * M_PI * c / k) + normal(rng);
  }
  return X;
}

// One E-step and M-step, written out directly (responsibilities as an n × k matrix).
GaussianMixture reference_em_step(const GaussianMixture& m, const Eigen::MatrixXd& X,
                                  double reg_covar) {
  const Eigen::MatrixXd resp = m.predict_proba(X);
  const int k = m.n_components();
  const int d = m.n_features();
  Eigen::VectorXd nk = resp.colwise().sum().transpose().array() + 10 * 2.220446049250313e-16;
  Eigen::MatrixXd means = (resp.transpose() * X).array().colwise() / nk.array();
  std::vector<Eigen::MatrixXd> covariances;
  for (int c = 0; c < k; ++c) {
    const Eigen::MatrixXd diff = X.rowwise() - means.row(c);
    Eigen::MatrixXd cov =
        (diff.array().colwise() * resp.col(c).array()).matrix().transpose() * diff / nk[c];
    cov.diagonal().array() += reg_covar;
    if (m.covariance_type() == CovarianceType::kDiag) {
      cov = Eigen::MatrixXd(cov.diagonal().asDiagonal());
    } else if (m.covariance_type() == CovarianceType::kSpherical) {
      cov = Eigen::MatrixXd::Identity(d, d) * cov.diagonal().mean();
    }
    covariances.push_back(cov);
  }
  return *GaussianMixture::create(m.covariance_type(), nk / nk.sum(), means, covariances);
}

TEST(Fit, OneIterationFromGivenParametersIsOneEmStep) {
  const Eigen::MatrixXd X = clusters(3, 1001, 5);
  for (CovarianceType type :
       {CovarianceType::kFull, CovarianceType::kDiag, CovarianceType::kSpherical}) {
    Eigen::VectorXd w = Eigen::VectorXd::Constant(3, 1.0 / 3);
    Eigen::MatrixXd mu(3, 2);
    mu << 5, 0, -5, 5, 0, -5;  // deliberately off
    std::vector<Eigen::MatrixXd> cov(3, Eigen::MatrixXd::Identity(2, 2) * 50);
    const GaussianMixture start = *GaussianMixture::create(type, w, mu, cov);
    GmmFitOptions options;
    options.n_components = 3;
    options.covariance_type = type;
    options.init = &start;
    options.max_iter = 1;
    Result<GmmFit> fit = fit_gmm(X, options);
    ASSERT_TRUE(fit.ok()) << fit.error().message;
    EXPECT_EQ(fit->info.n_iter, 1);
    EXPECT_FALSE(fit->info.converged);
    EXPECT_NEAR(fit->info.lower_bound, start.score(X), 1e-12);
    const GaussianMixture expected = reference_em_step(start, X, options.reg_covar);
    EXPECT_LT((fit->model.weights() - expected.weights()).cwiseAbs().maxCoeff(), 1e-13);
    EXPECT_LT((fit->model.means() - expected.means()).cwiseAbs().maxCoeff(), 1e-11);
    for (int c = 0; c < 3; ++c) {
      EXPECT_LT((fit->model.covariances()[c] - expected.covariances()[c]).cwiseAbs().maxCoeff(),
                1e-10);
    }
    EXPECT_NEAR(fit->info.mean_log_likelihood, fit->model.score(X), 1e-15);
  }
}

TEST(Fit, BicPicksTheTrueNumberOfComponents) {
  for (int k : {1, 2, 4}) {
    const Eigen::MatrixXd X = clusters(k, 2000, 10 + k);
    GmmFitOptions options;
    Result<GmmFit> fit = fit_gmm_select_k(X, options, 1, 7);
    ASSERT_TRUE(fit.ok()) << fit.error().message;
    EXPECT_EQ(fit->model.n_components(), k);
    ASSERT_EQ(fit->info.bic_by_k.size(), 7u);
    for (const auto& [kk, bic] : fit->info.bic_by_k) {
      EXPECT_GE(bic, fit->info.bic) << kk;
    }
  }
}

TEST(Fit, DeterministicForASeedWhateverTheThreads) {
  const Eigen::MatrixXd X = clusters(4, 30000, 3);  // several parallel chunks
  GmmFitOptions options;
  options.n_components = 4;
  options.seed = 7;
  options.n_init = 2;
  options.threads = 1;
  Result<GmmFit> one = fit_gmm(X, options);
  ASSERT_TRUE(one.ok());
  for (int threads : {2, 3, 8}) {
    options.threads = threads;
    Result<GmmFit> many = fit_gmm(X, options);
    ASSERT_TRUE(many.ok());
    EXPECT_EQ(one->model.means(), many->model.means()) << threads;  // bit for bit
    EXPECT_EQ(one->model.weights(), many->model.weights());
    EXPECT_EQ(one->info.mean_log_likelihood, many->info.mean_log_likelihood);
  }
  options.seed = 8;
  Result<GmmFit> other = fit_gmm(X, options);
  ASSERT_TRUE(other.ok());
  // Another seed, another start, the same clusters.
  EXPECT_NEAR(other->info.mean_log_likelihood, one->info.mean_log_likelihood, 1e-6);
}

TEST(Fit, RestartsKeepTheBestLowerBound) {
  const Eigen::MatrixXd X = clusters(5, 3000, 4);
  GmmFitOptions options;
  options.n_components = 8;  // more components than clusters: many local optima
  options.init_candidates = 1;
  Result<GmmFit> single = fit_gmm(X, options);
  options.n_init = 6;
  Result<GmmFit> best = fit_gmm(X, options);
  ASSERT_TRUE(single.ok() && best.ok());
  // The first restart is the single fit's; the best one is at least as good.
  EXPECT_GE(best->info.lower_bound, single->info.lower_bound);
  EXPECT_GE(best->info.best_init, 0);
  EXPECT_LT(best->info.best_init, 6);
}

TEST(Fit, BadRequests) {
  const Eigen::MatrixXd X = clusters(2, 10, 1);
  GmmFitOptions options;
  options.n_components = 11;
  EXPECT_NE(fit_gmm(X, options).error().message.find("too few"), std::string::npos);
  options.n_components = 0;
  EXPECT_FALSE(fit_gmm(X, options).ok());
  options.n_components = 2;
  options.tol = -1;
  EXPECT_FALSE(fit_gmm(X, options).ok());
  options.tol = 1e-3;
  Eigen::MatrixXd bad = X;
  bad(3, 1) = std::nan("");
  EXPECT_NE(fit_gmm(bad, options).error().message.find("non-finite"), std::string::npos);
  // An initial model of another shape.
  const GaussianMixture three = *GaussianMixture::create(
      CovarianceType::kFull, Eigen::VectorXd::Ones(3), Eigen::MatrixXd::Zero(3, 2),
      std::vector<Eigen::MatrixXd>(3, Eigen::MatrixXd::Identity(2, 2)));
  options.init = &three;
  EXPECT_NE(fit_gmm(X, options).error().message.find("does not match"), std::string::npos);
}

TEST(Fit, CollapsedComponentIsAnErrorNotACrash) {
  // Two distinct points, two components, no regularisation: a component sits on one point with
  // zero variance.
  Eigen::MatrixXd X(6, 1);
  X << 1, 1, 1, 2, 2, 2;
  GmmFitOptions options;
  options.n_components = 2;
  options.reg_covar = 0;
  Result<GmmFit> fit = fit_gmm(X, options);
  ASSERT_FALSE(fit.ok());
  EXPECT_NE(fit.error().message.find("reg_covar"), std::string::npos);
  options.reg_covar = 1e-6;  // sklearn's default makes it well defined
  EXPECT_TRUE(fit_gmm(X, options).ok());
}

TEST(KMeans, SeparatesClearClusters) {
  const Eigen::MatrixXd X = clusters(4, 4000, 9);
  Result<KMeansResult> km = kmeans(X, 4, 1);
  ASSERT_TRUE(km.ok());
  // Samples i and i + 4 come from the same cluster: same label; four labels in all.
  std::set<int> labels;
  for (int i = 0; i + 4 < X.rows(); ++i) {
    ASSERT_EQ(km->labels[i], km->labels[i + 4]) << i;
    labels.insert(km->labels[i]);
  }
  EXPECT_EQ(labels.size(), 4u);
  EXPECT_FALSE(kmeans(X, 0, 1).ok());
}

}  // namespace
}  // namespace eacgm
