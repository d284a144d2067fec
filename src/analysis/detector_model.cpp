#include "analysis/detector_model.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "analysis/gmm_fit.h"
#include "analysis/gmm_io.h"
#include "common/atomic_file.h"
#include "common/json_text.h"

namespace eacgm {
namespace {

// Mean and standard deviation of the non-NaN entries of a column; NaN mean when there are none.
std::pair<double, double> mean_std(const Eigen::VectorXd& column) {
  double sum = 0, sum_sq = 0;
  int n = 0;
  for (double v : column) {
    if (std::isnan(v)) continue;
    sum += v;
    ++n;
  }
  if (n == 0) return {kNaN, kNaN};
  const double mean = sum / n;
  for (double v : column) {
    if (!std::isnan(v)) sum_sq += (v - mean) * (v - mean);
  }
  return {mean, std::sqrt(sum_sq / n)};
}

std::vector<double> to_vector(const Eigen::VectorXd& v) { return {v.data(), v.data() + v.size()}; }

Result<Eigen::VectorXd> vector_from_json(const nlohmann::json& j, const char* key, size_t n,
                                         const std::string& where) {
  if (!j.contains(key) || !j[key].is_array() || j[key].size() != n) {
    return Error{fmt::format("{}: '{}' must be an array of {} numbers", where, key, n)};
  }
  Eigen::VectorXd v(static_cast<Eigen::Index>(n));
  for (size_t i = 0; i < n; ++i) {
    if (!j[key][i].is_number() || !std::isfinite(j[key][i].get<double>())) {
      return Error{fmt::format("{}: '{}'[{}] is not a finite number", where, key, i)};
    }
    v[static_cast<Eigen::Index>(i)] = j[key][i].get<double>();
  }
  return v;
}

}  // namespace

FeatureScaler FeatureScaler::fit(const Eigen::MatrixXd& X, std::vector<int> features,
                                 ScalingKind kind, double clip_sigma) {
  FeatureScaler s;
  s.kind = kind;
  s.clip_sigma = clip_sigma;
  s.features = std::move(features);
  const Eigen::Index d = X.cols();
  s.mean.resize(d);
  s.std_dev.resize(d);
  s.min.resize(d);
  s.range.resize(d);
  for (Eigen::Index i = 0; i < d; ++i) {
    Eigen::VectorXd column = X.col(i);
    auto [mean, std] = mean_std(column);
    if (std::isnan(mean)) mean = std = 0;
    for (double& v : column) {
      if (!std::isnan(v)) v = std::clamp(v, mean - clip_sigma * std, mean + clip_sigma * std);
    }
    std::tie(mean, std) = mean_std(column);
    double lo = mean, hi = mean;
    for (double v : column) {
      if (std::isnan(v)) continue;
      lo = std::min(lo, v);
      hi = std::max(hi, v);
    }
    const double floor = feature_min_scale(s.features[static_cast<size_t>(i)], mean);
    s.mean[i] = mean;
    s.std_dev[i] = std::max(std, floor);
    s.min[i] = lo;
    s.range[i] = std::max(hi - lo, floor);
  }
  return s;
}

Eigen::VectorXd FeatureScaler::transform(const std::vector<double>& window_features) const {
  Eigen::VectorXd x(static_cast<Eigen::Index>(features.size()));
  for (size_t i = 0; i < features.size(); ++i) {
    const auto k = static_cast<Eigen::Index>(i);
    double v = window_features[static_cast<size_t>(features[i])];
    if (std::isnan(v)) v = mean[k];
    x[k] = kind == ScalingKind::kStandard ? (v - mean[k]) / std_dev[k] : (v - min[k]) / range[k];
  }
  return x;
}

double calibrate_threshold(const Eigen::VectorXd& training, const ThresholdRule& rule) {
  if (rule.kind == ThresholdRule::Kind::kDensity) return std::log(rule.density);
  std::vector<double> v = to_vector(training);
  std::sort(v.begin(), v.end());
  if (v.empty()) return -std::numeric_limits<double>::infinity();
  // Linear interpolation between order statistics (numpy's default quantile).
  const double pos = std::clamp(rule.quantile, 0.0, 1.0) * static_cast<double>(v.size() - 1);
  const auto lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(lo + 1, v.size() - 1);
  const double q = v[lo] + (pos - static_cast<double>(lo)) * (v[hi] - v[lo]);
  return q - rule.margin;
}

Result<EntityBaseline> EntityBaseline::fit(const std::vector<Window>& windows,
                                           const BaselineOptions& options) {
  if (windows.size() < options.min_windows) {
    return Error{
        fmt::format("{} windows, {} needed for a baseline", windows.size(), options.min_windows)};
  }
  EntityBaseline b;
  b.windows = windows.size();
  // Features the worker has in at least half of its windows (no NCCL: no NCCL features).
  std::vector<int> features;
  for (int f = 0; f < kWindowFeatureCount; ++f) {
    size_t present = 0;
    for (const Window& w : windows) present += !std::isnan(w.features[static_cast<size_t>(f)]);
    if (2 * present >= windows.size()) features.push_back(f);
  }
  const auto n = static_cast<Eigen::Index>(windows.size());
  Eigen::MatrixXd raw(n, static_cast<Eigen::Index>(features.size()));
  for (Eigen::Index r = 0; r < n; ++r) {
    for (size_t c = 0; c < features.size(); ++c) {
      raw(r, static_cast<Eigen::Index>(c)) =
          windows[static_cast<size_t>(r)].features[static_cast<size_t>(features[c])];
    }
  }
  b.scaler = FeatureScaler::fit(raw, features, options.scaling, options.clip_sigma);
  Eigen::MatrixXd X(n, static_cast<Eigen::Index>(features.size()));
  for (Eigen::Index r = 0; r < n; ++r) {
    X.row(r) = b.scaler.transform(windows[static_cast<size_t>(r)].features).transpose();
  }
  if (!features.empty()) {
    GmmFitOptions fit;
    fit.covariance_type = options.covariance;
    fit.reg_covar = options.reg_covar;
    fit.threads = 1;  // small data, and the live tracer must not fan out
    fit.init_candidates = 1;
    // Ten windows per component at least: with fewer, EM fits components around a handful of
    // windows whose spread is far narrower than the job's (a healthy window then falls outside).
    const int k_max = std::clamp(static_cast<int>(windows.size() / 10), 1, options.max_components);
    if (auto r = fit_gmm_select_k(X, fit, 1, k_max)) {
      b.gmm = std::move(r->model);
      std::vector<std::string> names;
      for (int f : features) names.emplace_back(window_feature_names()[static_cast<size_t>(f)]);
      b.gmm->set_feature_names(std::move(names));
      b.gmm->set_threads(1);
      const Eigen::VectorXd ll = b.gmm->score_samples(X);
      b.training_min_log_likelihood = ll.minCoeff();
      b.threshold = calibrate_threshold(ll, options.threshold);
    }
  }
  // Per-API latency: the spread of the window medians, not of single calls (a window median is
  // what the detector compares).
  std::map<std::string_view, std::vector<double>> medians;
  for (const Window& w : windows) {
    for (const auto& [api, aw] : w.apis) {
      if (aw.log_durations.size() >= options.min_api_calls) {
        medians[api].push_back(aw.median_log_duration());
      }
    }
  }
  for (const auto& [api, m] : medians) {
    if (2 * m.size() < options.min_windows) continue;
    LatencyBaseline lb;
    lb.median_log_ns = median(m);
    lb.mad_log_ns = median_absolute_deviation(m, lb.median_log_ns);
    lb.windows = m.size();
    b.latency.emplace(std::string(api), lb);
  }
  std::vector<double> rates, busy;
  for (const Window& w : windows) {
    rates.push_back(w.features[kCallRate]);
    busy.push_back(w.features[kBusyShare]);
  }
  b.call_rate_median = median(rates);
  b.call_rate_mad = median_absolute_deviation(rates, b.call_rate_median);
  b.busy_share_median = median(busy);
  return b;
}

nlohmann::ordered_json EntityBaseline::to_json() const {
  nlohmann::ordered_json j;
  j["windows"] = windows;
  nlohmann::ordered_json names = nlohmann::ordered_json::array();
  for (int f : scaler.features) names.push_back(window_feature_names()[static_cast<size_t>(f)]);
  j["features"] = std::move(names);
  j["scaling"] = scaler.kind == ScalingKind::kStandard ? "standard" : "minmax";
  j["clip_sigma"] = scaler.clip_sigma;
  j["mean"] = to_vector(scaler.mean);
  j["std"] = to_vector(scaler.std_dev);
  j["min"] = to_vector(scaler.min);
  j["range"] = to_vector(scaler.range);
  j["gmm"] = gmm ? nlohmann::ordered_json(gmm_to_json(*gmm)) : nlohmann::ordered_json(nullptr);
  j["threshold_log_likelihood"] = threshold;
  j["training_min_log_likelihood"] = training_min_log_likelihood;
  nlohmann::ordered_json lat = nlohmann::ordered_json::object();
  for (const auto& [api, lb] : latency) {
    lat[api] = {{"median_log_ns", lb.median_log_ns},
                {"mad_log_ns", lb.mad_log_ns},
                {"windows", lb.windows}};
  }
  j["latency"] = std::move(lat);
  j["throughput"] = {{"call_rate_median", call_rate_median},
                     {"call_rate_mad", call_rate_mad},
                     {"busy_share_median", busy_share_median}};
  return j;
}

Result<EntityBaseline> EntityBaseline::from_json(const nlohmann::json& j,
                                                 const std::string& where) {
  try {
    EntityBaseline b;
    if (!j.is_object()) return Error{fmt::format("{}: not an object", where)};
    b.windows = j.at("windows").get<size_t>();
    if (!j.at("features").is_array())
      return Error{fmt::format("{}: 'features' is not a list", where)};
    for (const auto& name : j.at("features")) {
      const std::string text = name.is_string() ? name.get<std::string>() : name.dump();
      const std::optional<int> index = window_feature_index(text);
      if (!index) {
        return Error{fmt::format("{}: unknown feature '{}' (this eacgm knows: {})", where, text,
                                 fmt::join(window_feature_names(), ", "))};
      }
      b.scaler.features.push_back(*index);
    }
    const std::string scaling = j.at("scaling").get<std::string>();
    if (scaling != "standard" && scaling != "minmax") {
      return Error{fmt::format("{}: unknown scaling '{}' (standard or minmax)", where, scaling)};
    }
    b.scaler.kind = scaling == "standard" ? ScalingKind::kStandard : ScalingKind::kMinMax;
    b.scaler.clip_sigma = j.at("clip_sigma").get<double>();
    const size_t d = b.scaler.features.size();
    for (auto [key, target] : {std::pair{"mean", &b.scaler.mean},
                               {"std", &b.scaler.std_dev},
                               {"min", &b.scaler.min},
                               {"range", &b.scaler.range}}) {
      auto v = vector_from_json(j, key, d, where);
      if (!v) return v.error();
      *target = std::move(*v);
    }
    if ((b.scaler.std_dev.array() <= 0).any() || (b.scaler.range.array() <= 0).any()) {
      return Error{fmt::format("{}: 'std' and 'range' must be positive", where)};
    }
    if (!j.at("gmm").is_null()) {
      auto gmm = gmm_from_json(j.at("gmm"));
      if (!gmm) return Error{fmt::format("{}: gmm: {}", where, gmm.error().message)};
      if (static_cast<size_t>(gmm->n_features()) != d) {
        return Error{
            fmt::format("{}: the gmm has {} features, the scaler {}", where, gmm->n_features(), d)};
      }
      gmm->set_threads(1);
      b.gmm = std::move(*gmm);
    }
    b.threshold = j.at("threshold_log_likelihood").get<double>();
    b.training_min_log_likelihood = j.value("training_min_log_likelihood", b.threshold);
    for (const auto& [api, lb] : j.at("latency").items()) {
      b.latency[api] = {lb.at("median_log_ns").get<double>(), lb.at("mad_log_ns").get<double>(),
                        lb.at("windows").get<size_t>()};
    }
    const auto& t = j.at("throughput");
    b.call_rate_median = t.at("call_rate_median").get<double>();
    b.call_rate_mad = t.at("call_rate_mad").get<double>();
    b.busy_share_median = t.at("busy_share_median").get<double>();
    return b;
  } catch (const nlohmann::json::exception& e) {
    return Error{fmt::format("{}: {}", where, e.what())};
  }
}

const EntityBaseline* DetectorModel::find(const std::string& key) const {
  auto it = entities.find(key);
  if (it == entities.end()) it = entities.find("*");
  return it == entities.end() ? nullptr : &it->second;
}

Result<void> save_detector_model(const std::string& path, const DetectorModel& model) {
  nlohmann::ordered_json j;
  j["format"] = "eacgm-detector";
  j["version"] = 1;
  j["window_s"] = model.window_s;
  nlohmann::ordered_json entities = nlohmann::ordered_json::object();
  for (const auto& [key, b] : model.entities) entities[key] = b.to_json();
  j["entities"] = std::move(entities);
  return write_file_atomically(path, json_text(j, 1) + '\n');
}

Result<DetectorModel> load_detector_model(const std::string& path) {
  std::ifstream f(path);
  if (!f) return Error{fmt::format("cannot read model {}: {}", path, std::strerror(errno))};
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(f);
  } catch (const nlohmann::json::exception& e) {
    return Error{fmt::format("model {} is not JSON: {}", path, e.what())};
  }
  if (!j.is_object() || j.value("format", "") != "eacgm-detector") {
    return Error{fmt::format(
        "{} is not an eacgm detector model (no \"format\": \"eacgm-detector\"; `eacgm model fit` "
        "writes them)",
        path)};
  }
  if (j.value("version", 0) != 1) {
    return Error{fmt::format("model {}: unsupported version {}", path, j.value("version", 0))};
  }
  DetectorModel m;
  m.window_s = j.value("window_s", 1.0);
  if (!(m.window_s > 0)) return Error{fmt::format("model {}: window_s must be positive", path)};
  if (!j.contains("entities") || !j["entities"].is_object() || j["entities"].empty()) {
    return Error{fmt::format("model {}: no 'entities'", path)};
  }
  for (const auto& [key, value] : j["entities"].items()) {
    auto b = EntityBaseline::from_json(value, fmt::format("model {}: entity '{}'", path, key));
    if (!b) return b.error();
    m.entities.emplace(key, std::move(*b));
  }
  return m;
}

}  // namespace eacgm
