#include "analysis/gmm_io.h"

#include <fmt/format.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "common/atomic_file.h"

namespace eacgm {
namespace {

using Eigen::Index;
using nlohmann::json;
using nlohmann::ordered_json;

constexpr const char* kFormat = "eacgm-gmm";
constexpr int kVersion = 1;

ordered_json row(const Eigen::Ref<const Eigen::RowVectorXd>& v) {
  ordered_json out = ordered_json::array();
  for (Index i = 0; i < v.size(); ++i) out.push_back(v[i]);
  return out;
}

ordered_json matrix(const Eigen::Ref<const Eigen::MatrixXd>& m) {
  ordered_json out = ordered_json::array();
  for (Index r = 0; r < m.rows(); ++r) out.push_back(row(m.row(r)));
  return out;
}

// A JSON array of exactly `n` finite numbers.
Result<Eigen::VectorXd> numbers(const json& j, Index n, const std::string& what) {
  if (!j.is_array() || static_cast<Index>(j.size()) != n) {
    return Error{fmt::format("{} must be an array of {} numbers", what, n)};
  }
  Eigen::VectorXd out(n);
  for (Index i = 0; i < n; ++i) {
    const json& v = j[static_cast<std::size_t>(i)];
    if (!v.is_number() || !std::isfinite(v.get<double>())) {
      return Error{fmt::format("{}[{}] is not a finite number", what, i)};
    }
    out[i] = v.get<double>();
  }
  return out;
}

Result<Eigen::MatrixXd> numbers(const json& j, Index rows, Index cols, const std::string& what) {
  if (!j.is_array() || static_cast<Index>(j.size()) != rows) {
    return Error{fmt::format("{} must be an array of {} rows of {} numbers", what, rows, cols)};
  }
  Eigen::MatrixXd out(rows, cols);
  for (Index r = 0; r < rows; ++r) {
    Result<Eigen::VectorXd> v =
        numbers(j[static_cast<std::size_t>(r)], cols, fmt::format("{}[{}]", what, r));
    if (!v) return v.error();
    out.row(r) = v->transpose();
  }
  return out;
}

Result<GaussianMixture> parse(const json& j) {
  if (!j.is_object()) return Error{"not a JSON object"};
  if (j.contains("format") && j["format"] != kFormat) {
    return Error{fmt::format("format is {}, expected \"{}\"", j["format"].dump(), kFormat)};
  }
  if (j.contains("version") &&
      (!j["version"].is_number_integer() || j["version"].get<int>() > kVersion)) {
    return Error{fmt::format("version {} is not supported (this eacgm reads version {})",
                             j["version"].dump(), kVersion)};
  }
  for (const char* key : {"covariance_type", "weights", "means", "covariances"}) {
    if (!j.contains(key)) return Error{fmt::format("\"{}\" is missing", key)};
  }
  if (!j["covariance_type"].is_string()) return Error{"covariance_type must be a string"};
  const std::string type_name = j["covariance_type"].get<std::string>();
  const std::optional<CovarianceType> type = covariance_type_from_name(type_name);
  if (!type) {
    return Error{fmt::format("covariance_type \"{}\" is not full, diag or spherical", type_name)};
  }
  const json& jw = j["weights"];
  const json& jm = j["means"];
  if (!jw.is_array() || jw.empty()) return Error{"weights must be a non-empty array"};
  if (!jm.is_array() || jm.empty() || !jm[0].is_array() || jm[0].empty()) {
    return Error{"means must be a non-empty array of non-empty arrays"};
  }
  const Index k = static_cast<Index>(jw.size());
  const Index d = static_cast<Index>(jm[0].size());
  if (j.contains("n_components") && j["n_components"] != k) {
    return Error{
        fmt::format("n_components is {} but there are {} weights", j["n_components"].dump(), k)};
  }
  if (j.contains("n_features") && j["n_features"] != d) {
    return Error{fmt::format("n_features is {} but the means have {}", j["n_features"].dump(), d)};
  }
  Result<Eigen::VectorXd> weights = numbers(jw, k, "weights");
  if (!weights) return weights.error();
  Result<Eigen::MatrixXd> means = numbers(jm, k, d, "means");
  if (!means) return means.error();

  const json& jc = j["covariances"];
  if (!jc.is_array() || static_cast<Index>(jc.size()) != k) {
    return Error{fmt::format("covariances must be an array of {} entries", k)};
  }
  std::vector<Eigen::MatrixXd> covariances;
  for (Index c = 0; c < k; ++c) {
    const json& entry = jc[static_cast<std::size_t>(c)];
    const std::string what = fmt::format("covariances[{}]", c);
    switch (*type) {
      case CovarianceType::kFull: {
        Result<Eigen::MatrixXd> m = numbers(entry, d, d, what);
        if (!m) return m.error();
        covariances.push_back(std::move(m.value()));
        break;
      }
      case CovarianceType::kDiag: {
        Result<Eigen::VectorXd> v = numbers(entry, d, what);
        if (!v) return v.error();
        covariances.emplace_back(v->asDiagonal());
        break;
      }
      case CovarianceType::kSpherical: {
        if (!entry.is_number() || !std::isfinite(entry.get<double>())) {
          return Error{fmt::format("{} is not a finite number", what)};
        }
        covariances.emplace_back(Eigen::MatrixXd::Identity(d, d) * entry.get<double>());
        break;
      }
    }
  }
  Result<GaussianMixture> model = GaussianMixture::create(
      *type, std::move(weights.value()), std::move(means.value()), std::move(covariances));
  if (!model) return model.error();
  if (j.contains("feature_names") && !j["feature_names"].is_null()) {
    const json& names = j["feature_names"];
    if (!names.is_array() || static_cast<Index>(names.size()) != d) {
      return Error{fmt::format("feature_names must be an array of {} strings", d)};
    }
    std::vector<std::string> out;
    for (const json& name : names) {
      if (!name.is_string()) return Error{"feature_names must be strings"};
      out.push_back(name.get<std::string>());
    }
    model->set_feature_names(std::move(out));
  }
  return model;
}

}  // namespace

ordered_json gmm_to_json(const GaussianMixture& model, const GmmFitInfo* info,
                         const GmmFitOptions* options) {
  ordered_json j;
  j["format"] = kFormat;
  j["version"] = kVersion;
  j["covariance_type"] = covariance_type_name(model.covariance_type());
  j["n_components"] = model.n_components();
  j["n_features"] = model.n_features();
  if (!model.feature_names().empty()) j["feature_names"] = model.feature_names();
  j["weights"] = row(model.weights().transpose());
  j["means"] = matrix(model.means());
  ordered_json covariances = ordered_json::array();
  for (const Eigen::MatrixXd& cov : model.covariances()) {
    switch (model.covariance_type()) {
      case CovarianceType::kFull:
        covariances.push_back(matrix(cov));
        break;
      case CovarianceType::kDiag:
        covariances.push_back(row(cov.diagonal().transpose()));
        break;
      case CovarianceType::kSpherical:
        covariances.push_back(cov(0, 0));
        break;
    }
  }
  j["covariances"] = std::move(covariances);
  if (info) {
    j["mean_log_likelihood"] = info->mean_log_likelihood;
    j["bic"] = info->bic;
    j["n_samples"] = info->n_samples;
  }
  if (info || options) {
    ordered_json fit;
    if (info) {
      fit["n_iter"] = info->n_iter;
      fit["converged"] = info->converged;
      fit["lower_bound"] = info->lower_bound;
      fit["best_init"] = info->best_init;
      fit["failed_inits"] = info->failed_inits;
    }
    if (options) {
      fit["init"] = options->init ? "given" : "k-means++";
      fit["seed"] = options->seed;
      fit["n_init"] = options->init ? 1 : options->n_init;
      if (!options->init) fit["init_candidates"] = options->init_candidates;
      fit["max_iter"] = options->max_iter;
      fit["tol"] = options->tol;
      fit["reg_covar"] = options->reg_covar;
    }
    if (info && !info->bic_by_k.empty()) {
      ordered_json by_k = ordered_json::array();
      for (const auto& [k, bic] : info->bic_by_k) by_k.push_back({{"k", k}, {"bic", bic}});
      fit["bic_by_k"] = std::move(by_k);
    }
    j["fit"] = std::move(fit);
  }
  return j;
}

Result<GaussianMixture> gmm_from_json(const json& j) {
  try {
    return parse(j);
  } catch (const json::exception& e) {  // a type the checks above did not foresee
    return Error{e.what()};
  }
}

Result<void> save_gmm(const std::string& path, const GaussianMixture& model, const GmmFitInfo* info,
                      const GmmFitOptions* options) {
  return write_file_atomically(path, gmm_to_json(model, info, options).dump(2) + "\n");
}

Result<GaussianMixture> load_gmm(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Error{fmt::format("{}: cannot open: {}", path, std::strerror(errno))};
  std::stringstream buffer;
  buffer << in.rdbuf();
  json j;
  try {
    j = json::parse(buffer.str());
  } catch (const json::parse_error& e) {
    return Error{fmt::format("{}: not valid JSON: {}", path, e.what())};
  }
  Result<GaussianMixture> model = gmm_from_json(j);
  if (!model) return Error{fmt::format("{}: not a GMM model: {}", path, model.error().message)};
  return model;
}

}  // namespace eacgm
