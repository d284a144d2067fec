// Window features, the seed's preprocessing (clip at ±3σ, standard or min-max scaling) and the
// threshold calibration, on inputs whose answers are known exactly.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "analysis/detector_model.h"
#include "analysis/features.h"
#include "test_support.h"

namespace eacgm {
namespace {

CallSample call(std::string_view name, uint64_t start_ns, uint64_t duration_ns,
                int64_t outstanding = 0, uint64_t bytes = 0) {
  CallSample c;
  c.pid = 42;
  c.name = name;
  c.api_class = api_class(c.layer, c.name);
  c.start_ns = start_ns;
  c.duration_ns = duration_ns;
  c.outstanding_bytes = outstanding;
  c.bytes = bytes;
  return c;
}

TEST(WindowFeatures, ExactValuesPerWindow) {
  WindowAggregator agg(kS, 0);
  const uint64_t t0 = 100 * kS;
  agg.add(call("cudaMalloc", t0 - 10, 10, 1 << 20, 1 << 20));  // ends at t0: window 0 starts there
  // Window 1: a 2 MiB allocation that stays (the floor rises from 1 to 3 MiB), 100 launches of
  // 999 ns, 10 syncs of 99999 ns, a 4 MiB copy while a transient 2 MiB more is held.
  agg.add(call("cudaMalloc", t0 + kS, 1000, 3 << 20, 2 << 20));
  for (int i = 0; i < 100; ++i) agg.add(call("cudaLaunchKernel", t0 + kS + i * kMs, 999, 3 << 20));
  for (int i = 0; i < 10; ++i) {
    agg.add(call("cudaStreamSynchronize", t0 + kS + 200 * kMs + i * kMs, 99999, 3 << 20));
  }
  agg.add(call("cudaMemcpyAsync", t0 + kS + 300 * kMs, 1000, 5 << 20, 4 << 20));
  EXPECT_TRUE(agg.close(t0 + 2 * kS - 1).size() == 1);  // only window 0 is over
  const std::vector<Window> ws = agg.close(t0 + 2 * kS);
  ASSERT_EQ(ws.size(), 1u);
  const Window& w = ws[0];
  EXPECT_EQ(w.index, 1);
  EXPECT_EQ(w.start_ns, t0 + kS);
  EXPECT_DOUBLE_EQ(w.features[kCallRate], 112);
  EXPECT_DOUBLE_EQ(w.features[kLaunchRate], 100);
  EXPECT_NEAR(w.features[kLaunchLatency], std::log(1000.0), 1e-12);
  EXPECT_NEAR(w.features[kSyncLatency], std::log(100000.0), 1e-12);
  EXPECT_NEAR(w.features[kBusyShare], (100 * 999 + 10 * 99999 + 2000) / 1e9, 1e-15);
  EXPECT_DOUBLE_EQ(w.features[kCopyRate], 4);
  EXPECT_DOUBLE_EQ(w.features[kDeviceMemory], 1);  // the level it started with, before the malloc
  EXPECT_DOUBLE_EQ(w.features[kDeviceMemorySlope], 0);
  EXPECT_TRUE(std::isnan(w.features[kCollectiveLatency]));  // no NCCL: absent, not zero
  EXPECT_DOUBLE_EQ(w.features[kErrorRate], 0);
  EXPECT_EQ(w.apis.at("cudaLaunchKernel").log_durations.size(), 100u);
  EXPECT_NEAR(w.apis.at("cudaStreamSynchronize").median_log_duration(), std::log(100000.0), 1e-12);
  // Window 2 starts at 5 MiB; the transient 2 MiB is freed: its floor is 3 MiB, the level between
  // steps, not the 5 MiB a boundary inside a step saw.
  agg.add(call("cudaFree", t0 + 2 * kS + kMs, 1000, 3 << 20));
  agg.add(call("cudaLaunchKernel", t0 + 2 * kS + 2 * kMs, 1000, 3 << 20));
  const std::vector<Window> next = agg.close(t0 + 3 * kS);
  ASSERT_EQ(next.size(), 1u);
  EXPECT_DOUBLE_EQ(next[0].features[kDeviceMemory], 3);
  EXPECT_DOUBLE_EQ(next[0].features[kDeviceMemorySlope], 2);  // floors 1 MiB, then 3 MiB
}

TEST(WindowFeatures, EmptyWindowsWhileAliveAndNoPartialWindowAtTheEnd) {
  WindowAggregator agg(kS, 0);
  agg.add(call("cudaLaunchKernel", 0, 10));
  // Silent for 3 s: the process lives, so windows 1 and 2 exist, with no calls in them.
  std::vector<Window> ws = agg.close(3 * kS + 10);
  ASSERT_EQ(ws.size(), 3u);
  EXPECT_EQ(ws[2].index, 2);
  EXPECT_DOUBLE_EQ(ws[2].features[kCallRate], 0);
  EXPECT_TRUE(std::isnan(ws[2].features[kLaunchLatency]));
  // It exits 0.5 s into window 3: that window is dropped, whatever comes later.
  agg.add(call("cudaLaunchKernel", 3 * kS + 100, 10));
  agg.end_process(42, 3 * kS + 500 * kMs);
  EXPECT_TRUE(agg.close(10 * kS).empty());
  EXPECT_TRUE(agg.finish(10 * kS).empty());
}

TEST(WindowFeatures, SessionEndDropsTheOpenWindow) {
  WindowAggregator agg(kS, 0);
  agg.add(call("cudaLaunchKernel", 0, 10));
  agg.add(call("cudaLaunchKernel", kS + 20, 10));
  const std::vector<Window> ws = agg.finish(kS + 900 * kMs);
  ASSERT_EQ(ws.size(), 1u);  // window 0 only; window 1 was cut short by the end
  EXPECT_EQ(ws[0].index, 0);
}

TEST(WindowFeatures, RobustStatistics) {
  EXPECT_DOUBLE_EQ(median({5, 1, 3}), 3);
  EXPECT_DOUBLE_EQ(median({4, 1, 3, 2}), 2.5);
  EXPECT_TRUE(std::isnan(median({})));
  const std::vector<double> v = {1, 2, 3, 4, 100};
  EXPECT_DOUBLE_EQ(median_absolute_deviation(v, 3), 1);
  EXPECT_EQ(api_class(Layer::kCuda, "cudaLaunchKernel"), ApiClass::kLaunch);
  EXPECT_EQ(api_class(Layer::kCuda, "cudaDeviceSynchronize"), ApiClass::kSync);
  EXPECT_EQ(api_class(Layer::kCuda, "cudaMallocHost"), ApiClass::kAlloc);
  EXPECT_EQ(api_class(Layer::kNccl, "ncclAllReduce"), ApiClass::kCollective);
  EXPECT_EQ(api_class(Layer::kNccl, "ncclCommInitRank"), ApiClass::kOther);
  const EventFeatures e = event_features(call("cudaMemcpy", 0, 999, 0, 1023));
  EXPECT_NEAR(e.log_duration, std::log(1000.0), 1e-12);
  EXPECT_NEAR(e.log_bytes, std::log(1024.0), 1e-12);
}

TEST(Scaling, ClipsAtThreeSigmaThenStandardizes) {
  // 20 values alternating 10 and 12, and one outlier at 1000.
  Eigen::MatrixXd X(21, 1);
  for (int i = 0; i < 20; ++i) X(i, 0) = i % 2 ? 12 : 10;
  X(20, 0) = 1000;
  const FeatureScaler s = FeatureScaler::fit(X, {kCallRate}, ScalingKind::kStandard);
  // Clipped at mean + 3σ of the raw column, then mean and σ again on the clipped values.
  double mean = (20 * 11 + 1000) / 21.0, var = 0;
  for (int i = 0; i < 21; ++i) var += (X(i, 0) - mean) * (X(i, 0) - mean);
  const double hi = mean + 3 * std::sqrt(var / 21);
  ASSERT_LT(hi, 1000);
  const double clipped_mean = (20 * 11 + hi) / 21.0;
  double clipped_var = 0;
  for (int i = 0; i < 21; ++i) {
    const double v = std::min(X(i, 0), hi);
    clipped_var += (v - clipped_mean) * (v - clipped_mean);
  }
  EXPECT_NEAR(s.mean[0], clipped_mean, 1e-9);
  EXPECT_NEAR(s.std_dev[0], std::sqrt(clipped_var / 21), 1e-9);
  EXPECT_NEAR(s.min[0], 10, 1e-12);
  EXPECT_NEAR(s.range[0], hi - 10, 1e-9);
  std::vector<double> w(kWindowFeatureCount, 0);
  w[kCallRate] = 1000;  // scored values are not clipped
  EXPECT_NEAR(s.transform(w)[0], (1000 - clipped_mean) / s.std_dev[0], 1e-9);
  w[kCallRate] = std::nan("");  // absent: imputed as typical
  EXPECT_DOUBLE_EQ(s.transform(w)[0], 0);
}

TEST(Scaling, MinMaxMapsTrainingRangeToUnitInterval) {
  Eigen::MatrixXd X(3, 2);
  X << 100, 0.5, 200, 0.7, 300, 0.9;
  const FeatureScaler s = FeatureScaler::fit(X, {kCallRate, kBusyShare}, ScalingKind::kMinMax);
  std::vector<double> w(kWindowFeatureCount, 0);
  w[kCallRate] = 300;
  w[kBusyShare] = 0.7;
  const Eigen::VectorXd x = s.transform(w);
  EXPECT_NEAR(x[0], 1, 1e-12);
  EXPECT_NEAR(x[1], 0.5, 1e-12);
}

TEST(Scaling, ConstantTrainingFeatureGetsItsMinimumScale) {
  Eigen::MatrixXd X = Eigen::MatrixXd::Constant(10, 1, 256);  // MiB, never moved in training
  const FeatureScaler s = FeatureScaler::fit(X, {kDeviceMemory}, ScalingKind::kStandard);
  EXPECT_DOUBLE_EQ(s.std_dev[0], feature_min_scale(kDeviceMemory, 256));
  EXPECT_DOUBLE_EQ(s.std_dev[0], 0.05 * 256);
}

TEST(Threshold, QuantileOfTrainingLikelihoodsMinusMargin) {
  Eigen::VectorXd ll(101);
  for (int i = 0; i <= 100; ++i) ll[i] = -static_cast<double>(i);  // -100 .. 0
  ThresholdRule rule;
  rule.quantile = 0.01;
  rule.margin = 0;
  EXPECT_NEAR(calibrate_threshold(ll, rule), -99, 1e-12);  // numpy.quantile(ll, 0.01)
  rule.quantile = 0.055;
  EXPECT_NEAR(calibrate_threshold(ll, rule), -94.5, 1e-12);
  rule.margin = 6;
  EXPECT_NEAR(calibrate_threshold(ll, rule), -100.5, 1e-12);
  rule.kind = ThresholdRule::Kind::kDensity;
  rule.density = 1e-5;
  EXPECT_NEAR(calibrate_threshold(ll, rule), std::log(1e-5), 1e-12);
}

TEST(DetectorModel, RoundTripAndBadModels) {
  std::vector<Window> ws;
  for (int i = 0; i < 12; ++i) {
    Window w;
    w.index = i + 1;
    w.features.assign(kWindowFeatureCount, std::nan(""));
    w.features[kCallRate] = 1000 + 10 * (i % 3);
    w.features[kBusyShare] = 0.1 + 0.01 * (i % 2);
    w.features[kLaunchLatency] = std::log(3000.0 + 100 * (i % 4));
    for (int k = 0; k < 20; ++k)
      w.apis["cudaLaunchKernel"].log_durations.push_back(std::log(3000.0 + k));
    ws.push_back(w);
  }
  auto b = EntityBaseline::fit(ws, {});
  ASSERT_TRUE(b) << b.error().message;
  EXPECT_EQ(b->scaler.features, (std::vector<int>{kCallRate, kLaunchLatency, kBusyShare}));
  ASSERT_TRUE(b->gmm);
  EXPECT_LT(b->threshold, b->training_min_log_likelihood);
  ASSERT_EQ(b->latency.count("cudaLaunchKernel"), 1u);
  EXPECT_DOUBLE_EQ(b->call_rate_median, 1010);

  DetectorModel m;
  m.entities.emplace("rank:0", *b);
  const std::string path = ::testing::TempDir() + "/eacgm_detector_model.json";
  ASSERT_TRUE(save_detector_model(path, m));
  auto loaded = load_detector_model(path);
  ASSERT_TRUE(loaded) << loaded.error().message;
  const EntityBaseline* l = loaded->find("rank:0");
  ASSERT_NE(l, nullptr);
  EXPECT_EQ(loaded->find("rank:1"), nullptr);  // no "*" entry: nothing for unknown workers
  EXPECT_EQ(l->scaler.features, b->scaler.features);
  EXPECT_DOUBLE_EQ(l->threshold, b->threshold);
  EXPECT_DOUBLE_EQ(l->gmm->score_samples(l->scaler.transform(ws[3].features).transpose())[0],
                   b->gmm->score_samples(b->scaler.transform(ws[3].features).transpose())[0]);

  // A feature this version does not compute is an error that names it.
  nlohmann::json j = b->to_json();
  j["features"][1] = "gpu_temperature";
  auto bad = EntityBaseline::from_json(j, "m.json");
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("unknown feature 'gpu_temperature'"), std::string::npos);
  j = b->to_json();
  j["mean"].erase(0);
  EXPECT_FALSE(EntityBaseline::from_json(j, "m.json"));
  EXPECT_FALSE(EntityBaseline::fit({ws.begin(), ws.begin() + 4}, {}));  // too few windows
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace eacgm
