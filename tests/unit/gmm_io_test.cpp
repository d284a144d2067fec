// Models as JSON files: a saved model loads back bit for bit (and scores identically), the layout
// has sklearn's shapes, and broken files are refused with a message that says what is wrong.
#include "analysis/gmm_io.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "analysis/gmm.h"
#include "analysis/gmm_fit.h"

namespace eacgm {
namespace {

namespace fs = std::filesystem;

class GmmIo : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("eacgm_gmm_io_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  std::string write(const std::string& name, const std::string& text) const {
    std::ofstream(path(name)) << text;
    return path(name);
  }

  fs::path dir_;
};

Eigen::MatrixXd data(int n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal;
  Eigen::MatrixXd X(n, 3);
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < 3; ++j) X(i, j) = normal(rng) * (j + 1) + (i % 3) * 7.0 / 3.0;
  }
  return X;
}

TEST_F(GmmIo, RoundTripIsExact) {
  const Eigen::MatrixXd X = data(500, 1);
  for (CovarianceType type :
       {CovarianceType::kFull, CovarianceType::kDiag, CovarianceType::kSpherical}) {
    GmmFitOptions options;
    options.n_components = 3;
    options.covariance_type = type;
    Result<GmmFit> fit = fit_gmm(X, options);
    ASSERT_TRUE(fit.ok());
    fit->model.set_feature_names({"launch_us", "sync_us", "bytes"});
    const std::string file = path(std::string(covariance_type_name(type)) + ".json");
    ASSERT_TRUE(save_gmm(file, fit->model, &fit->info, &options).ok());
    Result<GaussianMixture> loaded = load_gmm(file);
    ASSERT_TRUE(loaded.ok()) << loaded.error().message;
    EXPECT_EQ(loaded->covariance_type(), type);
    EXPECT_EQ(loaded->weights(), fit->model.weights());  // bit for bit: 17 digits written
    EXPECT_EQ(loaded->means(), fit->model.means());
    for (int c = 0; c < 3; ++c) EXPECT_EQ(loaded->covariances()[c], fit->model.covariances()[c]);
    EXPECT_EQ(loaded->feature_names(), fit->model.feature_names());
    EXPECT_EQ(loaded->score_samples(X), fit->model.score_samples(X));

    std::ifstream in(file);
    const nlohmann::json j = nlohmann::json::parse(in);
    EXPECT_EQ(j["format"], "eacgm-gmm");
    EXPECT_EQ(j["mean_log_likelihood"].get<double>(), fit->info.mean_log_likelihood);
    EXPECT_EQ(j["bic"].get<double>(), fit->info.bic);
    EXPECT_EQ(j["fit"]["n_iter"], fit->info.n_iter);
    // sklearn's covariances_ shapes: k × d × d, k × d, k.
    const nlohmann::json& cov = j["covariances"];
    ASSERT_EQ(cov.size(), 3u);
    if (type == CovarianceType::kFull) {
      EXPECT_EQ(cov[0].size(), 3u);
      EXPECT_EQ(cov[0][0].size(), 3u);
    } else if (type == CovarianceType::kDiag) {
      EXPECT_EQ(cov[0].size(), 3u);
      EXPECT_TRUE(cov[0][0].is_number());
    } else {
      EXPECT_TRUE(cov[0].is_number());
    }
  }
}

TEST_F(GmmIo, MinimalModelWithoutTrainingResults) {
  const std::string file = write("min.json", R"({"covariance_type": "diag",
      "weights": [0.25, 0.75], "means": [[0, 1], [2, 3]], "covariances": [[1, 2], [3, 4]]})");
  Result<GaussianMixture> m = load_gmm(file);
  ASSERT_TRUE(m.ok()) << m.error().message;
  EXPECT_EQ(m->n_components(), 2);
  EXPECT_EQ(m->covariances()[1](1, 1), 4);
  EXPECT_EQ(m->covariances()[1](0, 1), 0);
  EXPECT_TRUE(m->feature_names().empty());
}

TEST_F(GmmIo, BrokenFilesSayWhatIsWrong) {
  const struct {
    const char* text;
    const char* message;
  } cases[] = {
      {"{\"covariance_type\": ", "not valid JSON"},
      {"[1, 2]", "not a JSON object"},
      {R"({"format": "other", "covariance_type": "full"})", "format"},
      {R"({"weights": [1], "means": [[0]], "covariances": [[[1]]]})", "covariance_type"},
      {R"({"covariance_type": "tied", "weights": [1], "means": [[0]], "covariances": [1]})",
       "tied"},
      {R"({"covariance_type": "full", "weights": [0.5, 0.5], "means": [[0]],
           "covariances": [[[1]]]})",
       "means must be an array of 2"},
      {R"({"covariance_type": "full", "weights": [1], "means": [[0, 1]],
           "covariances": [[[1, 0]]]})",
       "covariances[0] must be an array of 2 rows"},
      {R"({"covariance_type": "spherical", "weights": [1], "means": [[0]],
           "covariances": ["x"]})",
       "covariances[0] is not a finite number"},
      {R"({"covariance_type": "diag", "weights": [1], "means": [[0, 1]],
           "covariances": [[1, -1]]})",
       "positive"},
      {R"({"covariance_type": "full", "weights": [1], "means": [[null]],
           "covariances": [[[1]]]})",
       "means[0][0] is not a finite number"},
      {R"({"covariance_type": "full", "weights": [1], "means": [[0]], "covariances": [[[1]]],
           "feature_names": ["a", "b"]})",
       "feature_names"},
      {R"({"version": 99, "covariance_type": "full", "weights": [1], "means": [[0]],
           "covariances": [[[1]]]})",
       "version"},
  };
  for (const auto& c : cases) {
    const std::string file = write("bad.json", c.text);
    Result<GaussianMixture> m = load_gmm(file);
    ASSERT_FALSE(m.ok()) << c.text;
    EXPECT_NE(m.error().message.find(file), std::string::npos) << m.error().message;
    EXPECT_NE(m.error().message.find(c.message), std::string::npos)
        << c.text << " -> " << m.error().message;
  }
  Result<GaussianMixture> missing = load_gmm(path("nope.json"));
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().message.find("nope.json: cannot open"), std::string::npos);
}

TEST_F(GmmIo, UnwritablePathIsAnError) {
  const GaussianMixture m =
      *GaussianMixture::create(CovarianceType::kSpherical, Eigen::VectorXd::Ones(1),
                               Eigen::MatrixXd::Zero(1, 1), {Eigen::MatrixXd::Identity(1, 1)});
  Result<void> saved = save_gmm(path("no/such/dir/m.json"), m);
  ASSERT_FALSE(saved.ok());
  EXPECT_NE(saved.error().message.find("cannot write"), std::string::npos);
}

}  // namespace
}  // namespace eacgm
