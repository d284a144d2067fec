#include "analysis/window_analyzer.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "common/human_text.h"

namespace eacgm {

namespace {

bool is_log_ns(int feature) {
  return feature == kLaunchLatency || feature == kSyncLatency || feature == kCollectiveLatency;
}

// A feature value in the unit a person reads.
std::string describe(int feature, double value) {
  if (std::isnan(value)) return "none";
  if (is_log_ns(feature)) return human_ns(std::expm1(value));
  switch (feature) {
    case kCallRate:
    case kLaunchRate:
    case kErrorRate:
      return fmt::format("{:.0f}/s", value);
    case kBusyShare:
      return fmt::format("{:.1f} %", 100 * value);
    case kCopyRate:
    case kDeviceMemorySlope:
      return fmt::format("{:.1f} MiB/s", value);
    case kDeviceMemory:
      return fmt::format("{:.1f} MiB", value);
    case kCollectiveBandwidth:
      return fmt::format("{:.2f} GB/s", value);
    default:
      return fmt::format("{:.3g}", value);
  }
}

// The seed's table of actions (§4.1), by what deviates.
std::string suggestion_for(int feature, double z) {
  switch (feature) {
    case kDeviceMemory:
    case kDeviceMemorySlope:
      return "device memory moves away from its usual level: compare the cudaMalloc and cudaFree "
             "call sites (events.sqlite holds every allocation and free with its pointer); look "
             "for tensors kept alive across steps";
    case kCollectiveLatency:
    case kCollectiveBandwidth:
      return "collectives are slower than usual: check the network for congestion (NCCL_DEBUG=INFO "
             "shows the transport), and try another algorithm (NCCL_ALGO=Tree or Ring)";
    case kLaunchLatency:
    case kSyncLatency:
      return "the GPU work is slower than usual: check the kernel choice (cuBLAS/cuDNN "
             "algorithm, shapes, precision) and the GPU's clocks and temperature (gpu layer)";
    case kErrorRate:
      return "calls fail: see errors_by_code in summary.json and the failing calls in "
             "events.sqlite";
    case kCopyRate:
      return "host-device copies changed: check transfer sizes and pinned memory";
    case kBusyShare:
      if (z > 0) {
        return "more time is spent inside CUDA calls: check the kernel choice and the GPU's "
               "clocks and temperature";
      }
      [[fallthrough]];
    default:
      return "the host stalls between GPU calls (Python, data loading, I/O): make I/O "
             "asynchronous, add DataLoader workers or pin memory, and profile the Python side "
             "(py-spy) for blocking calls";
  }
}

// The advice for `feature` deviating in a worker whose calls are mostly `layer`'s: the seed's
// table speaks of GPUs and collectives; a PyTorch operator on the CPU, or a job with no GPU
// layer among its calls, gets advice about the host instead.
std::string suggestion_for(Layer layer, int feature, double z) {
  if (layer_info(layer).on_gpu || feature == kDeviceMemory || feature == kDeviceMemorySlope ||
      feature == kCollectiveLatency || feature == kCollectiveBandwidth || feature == kErrorRate) {
    return suggestion_for(feature, z);
  }
  const bool slower_calls =
      feature == kLaunchLatency || feature == kSyncLatency || (feature == kBusyShare && z > 0);
  if (slower_calls) {
    return fmt::format(
        "the {} calls themselves are slower than usual: check their input shapes and dtypes, "
        "the threads they run on (torch.get_num_threads, OMP_NUM_THREADS) and what else "
        "competes for the CPUs",
        layer_name(layer));
  }
  return fmt::format(
      "the process spends more time outside its traced {} calls (Python, data loading, I/O): "
      "see the python layer's report for the functions that take it, add DataLoader workers, "
      "make I/O asynchronous",
      layer_name(layer));
}

// The layer with the most calls in `w`, or `fallback` when it has none.
Layer main_layer_of(const Window& w, Layer fallback) {
  std::map<Layer, size_t> calls;
  for (const auto& [name, api] : w.apis) calls[api.layer] += api.log_durations.size();
  Layer best = fallback;
  size_t most = 0;
  for (const auto& [layer, n] : calls) {
    if (n > most) {
      best = layer;
      most = n;
    }
  }
  return best;
}

std::string entity_name(uint32_t pid, const EntityInfo& info) {
  return info.rank ? fmt::format("pid {} (rank {})", pid, *info.rank) : fmt::format("pid {}", pid);
}

}  // namespace

std::string latency_suggestion(Layer layer, double robust_z) {
  return suggestion_for(layer, layer_info(layer).collectives ? kCollectiveLatency : kSyncLatency,
                        robust_z);
}

std::string entity_key(const EntityInfo& info) {
  const std::string_view worker = info.role == "worker" ? "worker:" : "";
  return info.rank ? fmt::format("{}rank:{}", worker, *info.rank)
                   : fmt::format("{}comm:{}", worker, info.comm);
}

WindowAnalyzer::WindowAnalyzer(AnalyzerOptions options, const DetectorModel* model)
    : options_(options), model_(model), windows_(options.window_ns) {}

std::vector<Anomaly> WindowAnalyzer::advance(uint64_t now_ns) {
  return process(windows_.close(now_ns));
}

std::vector<Anomaly> WindowAnalyzer::finish(uint64_t end_ns) {
  return process(windows_.finish(end_ns));
}

std::vector<Anomaly> WindowAnalyzer::process(std::vector<Window> windows) {
  std::vector<Anomaly> out;
  for (Window& w : windows) {
    auto [it, fresh] = entities_.try_emplace(w.pid);
    Entity& e = it->second;
    if (fresh || !e.info.rank) {  // the rank may be learned after the first window
      e.info = lookup_ ? lookup_(w.pid) : EntityInfo{};
      e.key = entity_key(e.info);
    }
    ++e.windows;
    if (w.index < 1) continue;  // the setup second is like no other
    if (overlaps_untraced(w)) {
      ++e.untraced;
      continue;
    }
    if (!e.baseline && model_) e.baseline = model_->find(e.key);
    if (!model_ && work_begins(e, w)) {  // learn from the work, not from the set-up before it
      ++e.warmup_restarts;
      e.warmup.clear();
      e.gave_up = false;
      e.learned.reset();
      e.baseline = nullptr;
      e.gmm = e.throughput = Episode{};
      e.latency.clear();
    }
    if (!e.baseline) {
      if (model_ || e.gave_up) continue;
      e.warmup.push_back(std::move(w));
      if (e.warmup.size() < options_.warmup_windows) continue;
      auto fitted = EntityBaseline::fit(e.warmup, options_.baseline);
      e.warmup.clear();
      if (!fitted) {
        e.gave_up = true;
        continue;
      }
      e.learned = std::move(*fitted);
      e.baseline = &*e.learned;
      continue;
    }
    ++e.scored;
    score(e, w, out);
  }
  return out;
}

bool WindowAnalyzer::work_begins(const Entity& e, const Window& w) const {
  const double rate = w.features[kCallRate];
  if (rate < options_.work_min_call_rate) return false;
  double before;  // the call rate it begins from
  if (e.learned) {
    before = e.learned->call_rate_median;
  } else if (!e.warmup.empty() && !e.gave_up) {
    std::vector<double> rates;
    rates.reserve(e.warmup.size());
    for (const Window& x : e.warmup) rates.push_back(x.features[kCallRate]);
    before = median(rates);
  } else {
    return false;  // nothing learned yet, or nothing could be
  }
  return before < options_.work_min_call_rate && rate >= options_.work_rate_ratio * before;
}

bool WindowAnalyzer::overlaps_untraced(const Window& w) const {
  // Windows come roughly in time order and intervals are few: the newest are checked first.
  for (auto it = untraced_.rbegin(); it != untraced_.rend(); ++it) {
    if (it->first < w.end_ns && w.start_ns < it->second) return true;
    if (it->second <= w.start_ns) break;  // this one and every older one ended before w began
  }
  return false;
}

bool WindowAnalyzer::step(Episode& ep, bool hit, const Window& w) const {
  if (!hit) {
    ep.hits = 0;
    if (ep.active && ++ep.misses >= options_.persist) ep.active = false;
    return false;
  }
  ep.misses = 0;
  if (ep.hits++ == 0) ep.first_hit_ns = w.start_ns;
  if (ep.active || ep.hits < options_.persist) return false;
  ep.active = true;
  return true;
}

Anomaly WindowAnalyzer::base_anomaly(const Entity& e, uint32_t pid, const Episode& ep,
                                     const Window& w) const {
  Anomaly a;
  a.pid = pid;
  a.rank = e.info.rank;
  auto seconds = [this](uint64_t ns) {
    return ns > session_start_ns_ ? static_cast<double>(ns - session_start_ns_) / 1e9 : 0.0;
  };
  a.t_s = seconds(ep.first_hit_ns);
  a.evidence["window_s"] = {seconds(ep.first_hit_ns), seconds(w.end_ns)};
  a.evidence["windows"] = ep.hits;
  a.evidence["baseline"] = e.learned ? fmt::format("warm-up of {} windows", e.baseline->windows)
                                     : fmt::format("model entity '{}'", e.key);
  return a;
}

void WindowAnalyzer::score(Entity& e, const Window& w, std::vector<Anomaly>& out) {
  const EntityBaseline& b = *e.baseline;
  const std::string who = entity_name(w.pid, e.info);
  auto span = [this](uint64_t from, uint64_t to) {
    auto s = [this](uint64_t ns) {
      return ns > session_start_ns_ ? static_cast<double>(ns - session_start_ns_) / 1e9 : 0.0;
    };
    return fmt::format("{:.1f}-{:.1f} s", s(from), s(to));
  };

  e.main_layer = main_layer_of(w, e.main_layer);
  if (options_.latency) {
    for (const auto& [api, lb] : b.latency) {
      auto it = w.apis.find(api);
      // Too few calls say nothing: the episode neither grows nor ends.
      if (it == w.apis.end() || it->second.log_durations.size() < options_.baseline.min_api_calls) {
        continue;
      }
      const double m = it->second.median_log_duration();
      const double allowed = std::max(std::log(options_.latency_min_ratio),
                                      options_.latency_mad_k * 1.4826 * lb.mad_log_ns);
      const double excess = m - lb.median_log_ns;
      Episode& ep = e.latency[api];
      if (!step(ep, excess > allowed, w)) continue;
      const double now_ns = std::expm1(m), base_ns = std::expm1(lb.median_log_ns);
      const double robust_z = excess / std::max(1.4826 * lb.mad_log_ns, 1e-3);
      Anomaly a = base_anomaly(e, w.pid, ep, w);
      a.kind = "latency";
      a.layer = it->second.layer;
      a.score = -excess;
      a.evidence["api"] = api;
      a.evidence["calls"] = it->second.log_durations.size();
      a.evidence["median_ns"] = now_ns;
      a.evidence["baseline_median_ns"] = base_ns;
      a.evidence["ratio"] = now_ns / std::max(base_ns, 1.0);
      a.evidence["features"] = nlohmann::json::array({{{"name", api + " median log_ns"},
                                                       {"value", m},
                                                       {"baseline", lb.median_log_ns},
                                                       {"z", robust_z}}});
      a.message = fmt::format(
          "{}: {} takes {} (median of {} calls, {}), {:.1f}x its baseline {} ({:.0f} robust "
          "deviations)",
          who, api, human_ns(now_ns), it->second.log_durations.size(),
          span(ep.first_hit_ns, w.end_ns), now_ns / std::max(base_ns, 1.0), human_ns(base_ns),
          robust_z);
      a.suggestion = latency_suggestion(a.layer, robust_z);
      out.push_back(std::move(a));
    }
  }

  if (options_.throughput && b.call_rate_median > 0) {
    const double rate = w.features[kCallRate];
    const double floor =
        std::min(b.call_rate_median * (1 - options_.throughput_min_drop),
                 b.call_rate_median - options_.throughput_mad_k * 1.4826 * b.call_rate_mad);
    if (step(e.throughput, rate < floor, w)) {
      const double busy = w.features[kBusyShare];
      const bool busier = busy > b.busy_share_median + 0.2;
      Anomaly a = base_anomaly(e, w.pid, e.throughput, w);
      a.kind = "throughput";
      a.layer = e.main_layer;
      const double drop = 1 - rate / b.call_rate_median;
      a.score = -drop;
      a.evidence["call_rate"] = rate;
      a.evidence["baseline_call_rate"] = b.call_rate_median;
      a.evidence["drop"] = drop;
      a.evidence["busy_share"] = busy;
      a.evidence["baseline_busy_share"] = b.busy_share_median;
      a.evidence["features"] = nlohmann::json::array(
          {{{"name", "call_rate"},
            {"value", rate},
            {"baseline", b.call_rate_median},
            {"z", (rate - b.call_rate_median) / std::max(1.4826 * b.call_rate_mad, 1e-9)}},
           {{"name", "busy_share"}, {"value", busy}, {"baseline", b.busy_share_median}}});
      a.message = fmt::format(
          "{}: {:.0f} calls/s in {}, {:.0f} % below its baseline {:.0f}/s; time inside traced "
          "calls {:.1f} % (baseline {:.1f} %): {}",
          who, rate, span(e.throughput.first_hit_ns, w.end_ns), 100 * drop, b.call_rate_median,
          100 * busy, 100 * b.busy_share_median,
          busier ? "the calls themselves got slower"
                 : fmt::format("the time between {} calls grew",
                               layer_info(a.layer).launches_kernels ? "GPU" : layer_name(a.layer)));
      a.suggestion = suggestion_for(a.layer, kBusyShare, busier ? 1 : -1);
      out.push_back(std::move(a));
    }
  }

  if (options_.gmm && b.gmm) {
    const Eigen::VectorXd x = b.scaler.transform(w.features);
    const GmmSampleScores s = b.gmm->score_detailed(x.transpose());
    const double ll = s.log_likelihood[0];
    // Worse: some feature moved the bad way. Busier (more time inside calls) is bad either way,
    // except beside a markedly higher call rate: then it is more work done, as when a job whose
    // warm-up fell while the machine's CPUs were taken gets them back.
    auto z_of = [&](size_t i) {
      const double value = w.features[static_cast<size_t>(b.scaler.features[i])];
      return std::isnan(value) ? std::nan("") : b.scaler.z(static_cast<int>(i), value);
    };
    bool more_calls = false;
    for (size_t i = 0; i < b.scaler.features.size(); ++i) {
      if (b.scaler.features[i] == kCallRate) more_calls = z_of(i) >= options_.gmm_min_worse_z;
    }
    bool worse = false;
    for (size_t i = 0; i < b.scaler.features.size() && !worse; ++i) {
      const int f = b.scaler.features[i];
      const double z = z_of(i);
      if (std::isnan(z) || (f == kBusyShare && more_calls)) continue;
      const int dir = worse_direction(f);
      worse = (dir == 0 ? std::abs(z) : dir * z) >= options_.gmm_min_worse_z;
    }
    if (step(e.gmm, ll < b.threshold && worse, w)) {
      // Each feature's deviation from the most likely component in units of that component's
      // standard deviation along it (its Mahalanobis contribution when the covariance is diagonal;
      // the default full covariance also weighs correlations, which this view leaves out).
      const int c = s.component[0];
      struct Dev {
        int feature;
        double z_component, z_baseline, value;
      };
      std::vector<Dev> devs;
      for (size_t i = 0; i < b.scaler.features.size(); ++i) {
        const auto k = static_cast<Eigen::Index>(i);
        const int f = b.scaler.features[i];
        const double sd = std::sqrt(b.gmm->covariances()[static_cast<size_t>(c)](k, k));
        const double value = w.features[static_cast<size_t>(f)];
        devs.push_back({f, (x[k] - b.gmm->means()(c, k)) / sd,
                        std::isnan(value) ? 0.0 : b.scaler.z(static_cast<int>(i), value), value});
      }
      std::sort(devs.begin(), devs.end(), [](const Dev& l, const Dev& r) {
        return std::abs(l.z_component) > std::abs(r.z_component);
      });
      devs.resize(std::min<size_t>(devs.size(), 3));
      Anomaly a = base_anomaly(e, w.pid, e.gmm, w);
      a.kind = "gmm";
      const int top = devs.front().feature;
      const bool collective = top == kCollectiveLatency || top == kCollectiveBandwidth;
      a.layer = collective ? collective_layer().value_or(e.main_layer) : e.main_layer;
      a.score = ll;
      a.evidence["log_likelihood"] = ll;
      a.evidence["threshold"] = b.threshold;
      a.evidence["component"] = c;
      nlohmann::json features = nlohmann::json::array();
      std::string parts;
      for (const Dev& d : devs) {
        const auto slot = std::find(b.scaler.features.begin(), b.scaler.features.end(), d.feature) -
                          b.scaler.features.begin();
        const double base = b.scaler.mean[slot];
        const std::string_view name = window_feature_names()[static_cast<size_t>(d.feature)];
        features.push_back({{"name", name},
                            {"value", d.value},
                            {"baseline", base},
                            {"z", d.z_baseline},
                            {"mahalanobis_contribution", d.z_component * d.z_component}});
        parts += fmt::format("{}{} {} vs {} ({:+.1f} sd)", parts.empty() ? "" : ", ", name,
                             describe(d.feature, d.value), describe(d.feature, base), d.z_baseline);
      }
      a.evidence["features"] = std::move(features);
      a.message = fmt::format(
          "{}: {} unlike its baseline (log-likelihood {:.1f}, threshold {:.1f}); most deviating: "
          "{}",
          who, span(e.gmm.first_hit_ns, w.end_ns), ll, b.threshold, parts);
      a.suggestion = suggestion_for(a.layer, top, devs.front().z_baseline);
      out.push_back(std::move(a));
    }
  }
}

std::set<uint32_t> WindowAnalyzer::unjudged() const {
  std::set<uint32_t> out;
  for (uint32_t pid : seen_) {
    const auto it = entities_.find(pid);
    if (it == entities_.end() || !it->second.baseline) out.insert(pid);
  }
  return out;
}

nlohmann::json WindowAnalyzer::report() const {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& [pid, e] : entities_) {
    nlohmann::json j = {
        {"pid", pid},
        {"rank", e.info.rank ? nlohmann::json(*e.info.rank) : nlohmann::json(nullptr)},
        {"key", e.key},
        {"windows", e.windows},
        {"scored_windows", e.scored},
        {"warmup_restarts", e.warmup_restarts}};
    if (!untraced_.empty()) j["untraced_windows"] = e.untraced;
    if (e.learned) {
      j["baseline"] = fmt::format("warm-up ({} windows)", e.learned->windows);
    } else if (e.baseline) {
      j["baseline"] = "model";
    } else {
      j["baseline"] = model_ ? "none (not in the model)" : "none (too few windows)";
    }
    out.push_back(std::move(j));
  }
  // Processes whose calls never filled a window past their setup second.
  for (uint32_t pid : seen_) {
    if (entities_.contains(pid)) continue;
    const EntityInfo info = lookup_ ? lookup_(pid) : EntityInfo{};
    out.push_back({{"pid", pid},
                   {"rank", info.rank ? nlohmann::json(*info.rank) : nlohmann::json(nullptr)},
                   {"key", entity_key(info)},
                   {"windows", 0},
                   {"scored_windows", 0},
                   {"warmup_restarts", 0},
                   {"baseline", "none (its calls ended within its setup second)"}});
  }
  return out;
}

}  // namespace eacgm
