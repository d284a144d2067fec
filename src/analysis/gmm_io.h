// Gaussian mixtures as JSON files. The layout follows scikit-learn's attribute shapes, so that a
// model is easy to read and to build from Python:
//
//   { "format": "eacgm-gmm", "version": 1,
//     "covariance_type": "full",            // "full" | "diag" | "spherical"
//     "n_components": 2, "n_features": 3,
//     "feature_names": ["a", "b", "c"],     // optional
//     "weights": [0.4, 0.6],                // k
//     "means": [[...], [...]],              // k × d
//     "covariances": [[[...]...], ...],     // full: k × d × d, diag: k × d, spherical: k
//     "mean_log_likelihood": -3.2, "bic": 1234.5, "n_samples": 1000,   // when fitted
//     "fit": { "n_iter": 12, "converged": true, ... } }                 // when fitted
//
// Numbers are written with 17 significant digits, so a model survives a round trip exactly.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "analysis/gmm.h"
#include "analysis/gmm_fit.h"
#include "common/result.h"

namespace eacgm {

// `info` and `options` (both optional) add the training results and settings.
nlohmann::ordered_json gmm_to_json(const GaussianMixture& model, const GmmFitInfo* info = nullptr,
                                   const GmmFitOptions* options = nullptr);
// Validates everything (shapes, finite numbers, positive definite covariances); training
// results in the file are ignored.
Result<GaussianMixture> gmm_from_json(const nlohmann::json& json);

// Written to a temporary file and renamed, so a reader never sees half a model.
Result<void> save_gmm(const std::string& path, const GaussianMixture& model,
                      const GmmFitInfo* info = nullptr, const GmmFitOptions* options = nullptr);
// Errors name `path`.
Result<GaussianMixture> load_gmm(const std::string& path);

}  // namespace eacgm
