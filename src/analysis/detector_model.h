// What "normal" looks like for one worker, learned from windows (features.h): the seed's
// preprocessing (clip at ±3σ, then standard or min-max scaling), a Gaussian mixture on the scaled
// window features with a threshold calibrated on the training data, and the robust baselines of
// the targeted detectors (per-API latency, throughput). A DetectorModel is one such baseline per
// worker, saved as JSON (`eacgm model fit`), reusing gmm_io for the mixture.
#pragma once

#include <Eigen/Core>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "analysis/features.h"
#include "analysis/gmm.h"
#include "common/result.h"

namespace eacgm {

enum class ScalingKind { kStandard, kMinMax };

// Per-feature scaling learned from training rows. Fitting computes mean and standard deviation,
// clips every value to mean ± clip_sigma·σ, and computes mean, σ, min and max again on the
// clipped values (the seed: "clip outliers at ±3σ", so one odd training window does not set the
// scale). NaN entries (a feature the window could not have) are ignored when fitting and imputed
// as the training mean when transforming. Scored values are not clipped: their deviation is the
// point.
struct FeatureScaler {
  ScalingKind kind = ScalingKind::kStandard;
  double clip_sigma = 3.0;
  std::vector<int> features;  // indices into the window features (features.h)
  // Of the clipped training values; std_dev and range never fall below feature_min_scale().
  Eigen::VectorXd mean, std_dev, min, range;

  // X: n × features.size(), already restricted to `features`.
  static FeatureScaler fit(const Eigen::MatrixXd& X, std::vector<int> features, ScalingKind kind,
                           double clip_sigma = 3.0);
  // A full window feature vector (kWindowFeatureCount) to the scaled model space.
  Eigen::VectorXd transform(const std::vector<double>& window_features) const;
  // Where each feature stands in training standard deviations (always the standard z, whatever
  // the model's scaling; for explanations).
  double z(int i, double value) const { return (value - mean[i]) / std_dev[i]; }
};

// Threshold on a window's log-likelihood below which it is anomalous.
struct ThresholdRule {
  enum class Kind { kQuantile, kDensity } kind = Kind::kQuantile;
  double quantile = 0.01;  // kQuantile: this quantile of the training log-likelihoods...
  double margin = 6.0;     // ...minus this many nats (few training windows: the quantile is close
                           // to their minimum, and a healthy window may fall a little lower)
  double density = 1e-5;   // kDensity: the seed's δ, on the scaled features' density
};
// The log-likelihood threshold the rule gives for these training log-likelihoods.
double calibrate_threshold(const Eigen::VectorXd& training_log_likelihoods,
                           const ThresholdRule& rule);

struct BaselineOptions {
  ScalingKind scaling = ScalingKind::kStandard;
  double clip_sigma = 3.0;
  // Full: the rates move together (a step is so many launches, copies and calls), and a diagonal
  // model would count one slowdown once per rate.
  CovarianceType covariance = CovarianceType::kFull;
  int max_components = 3;
  // In scaled units: keeps a component from trusting a spread that the few training windows
  // happened to make narrow.
  double reg_covar = 0.25;
  ThresholdRule threshold;
  size_t min_windows = 5;    // fewer: no baseline
  size_t min_api_calls = 5;  // an API's window median needs this many calls
};

// One API's typical latency: the median and MAD of its per-window median log duration.
struct LatencyBaseline {
  double median_log_ns = 0;
  double mad_log_ns = 0;
  size_t windows = 0;
};

struct EntityBaseline {
  size_t windows = 0;  // training windows
  FeatureScaler scaler;
  std::optional<GaussianMixture> gmm;  // none when the features could not be modelled
  double threshold = 0;                // on the GMM log-likelihood
  double training_min_log_likelihood = 0;
  std::map<std::string, LatencyBaseline> latency;  // by API
  double call_rate_median = 0, call_rate_mad = 0;
  double busy_share_median = 0;

  // Fails with fewer than options.min_windows windows.
  static Result<EntityBaseline> fit(const std::vector<Window>& windows,
                                    const BaselineOptions& options);
  nlohmann::ordered_json to_json() const;
  // Errors say what is wrong (unknown feature, shapes); `where` prefixes them.
  static Result<EntityBaseline> from_json(const nlohmann::json& j, const std::string& where);
};

// Baselines by worker: "rank:R" for processes with a rank, "comm:NAME" otherwise, and "*"
// (every worker's windows together) for workers the model has not seen.
struct DetectorModel {
  double window_s = 1.0;
  std::map<std::string, EntityBaseline> entities;

  const EntityBaseline* find(const std::string& key) const;
};
Result<void> save_detector_model(const std::string& path, const DetectorModel& model);
Result<DetectorModel> load_detector_model(const std::string& path);

}  // namespace eacgm
