// eacgm slo without a recorder: the statistics taken from synthetic measured runs (compare's
// RunData and p90 tails built by hand), the thresholds fitted from them, what is skipped and why,
// check's verdicts (held, violated by how much, not judged), slo.json's round trip and the errors
// of bad files, and the Prometheus rules. tests/bpf/test_slo.py runs the commands on real
// recordings.
#include "slo/slo.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "slo/measure.h"
#include "slo/rules.h"

namespace eacgm::slo {
namespace {

constexpr double kMiB = 1024.0 * 1024;

compare::MetricKey metric(std::string process, std::string layer, std::string what,
                          std::string_view name) {
  return {std::move(process), std::move(layer), std::move(what), std::string(name)};
}

// A healthy-looking 10 s run of one rank: cudaLaunchKernel's p90 `p90_ns` over 5,000 calls; 20
// steady windows of calls/s rising from 1000 to 1190 (times `pace`); a flat device memory of
// `memory` bytes; a GPU at 60 %; 12 MAP_POPULATE mappings; the nccl, cuda and os layers active.
SessionMeasure run(const std::string& dir, double p90_ns, double pace = 1,
                   double memory = 100 * kMiB) {
  SessionMeasure m;
  m.dir = dir;
  m.seconds = 10;
  m.steady_tails[metric("rank:0", "cuda", "cudaLaunchKernel", compare::kLatency)] = {p90_ns, 5000,
                                                                                     20};
  m.steady_tails[metric("rank:0", "cuda", "cudaMalloc", compare::kLatency)] = {20000, 50, 20};
  m.startup_tails[metric("rank:0", "cuda", "cudaMalloc", compare::kLatency)] = {30000, 150, 10};
  std::vector<double> rates;
  for (int i = 0; i < 20; ++i) rates.push_back(pace * (1000 + 10 * i));
  m.steady.metrics[metric("rank:0", "all", "all calls", compare::kPace)] = {rates, 20000, 0};
  m.steady.metrics[metric("rank:0", "memory", "device memory", compare::kMemoryPeak)] = {
      std::vector<double>(20, memory), 100, 0};
  m.steady.metrics[metric("job", "gpu", "device 0", compare::kGpuUtil)] = {
      std::vector<double>(20, 60.0), 200, 0};
  // Two start-up windows: too few for a percentile of windows.
  m.startup.metrics[metric("rank:0", "all", "all calls", compare::kPace)] = {{500, 600}, 110, 0};
  m.steady.metrics[metric("rank:0", "os", "MAP_POPULATE mmaps", compare::kEventRate)] = {{}, 12, 0};
  m.active_layers = {"cuda", "nccl", "os"};
  return m;
}

FitOptions options() {
  FitOptions o;
  o.windows = {1.0, 0.1, 0.5};
  return o;
}

Slo healthy_slo() {
  return fit(
      {observe(run("h1", 4000, 1.0)), observe(run("h2", 4200, 0.9)), observe(run("h3", 4100, 1.1))},
      options());
}

const Objective* find(const Slo& slo, Phase phase, std::string_view metric_name,
                      std::string_view what) {
  for (const Objective& o : slo.objectives) {
    if (o.key.phase == phase && o.key.metric == metric_name && o.key.what == what) return &o;
  }
  return nullptr;
}

const Skipped* find_skipped(const Slo& slo, Phase phase, std::string_view metric_name,
                            std::string_view what) {
  for (const Skipped& s : slo.skipped) {
    if (s.key.phase == phase && s.key.metric == metric_name && s.key.what == what) return &s;
  }
  return nullptr;
}

TEST(SloStatistics, QuantilesInterpolateBetweenRanks) {
  EXPECT_EQ(quantile({}, 0.9), 0);
  EXPECT_EQ(quantile({7}, 0.1), 7);
  EXPECT_DOUBLE_EQ(quantile({4, 1, 3, 2, 5}, 0.5), 3);
  EXPECT_DOUBLE_EQ(quantile({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, 0.9), 10);
  EXPECT_DOUBLE_EQ(quantile({1, 2}, 0.9), 1.9);
}

TEST(SloStatistics, ObserveTakesEachMetricsStatistic) {
  const Observed o = observe(run("r", 4000));
  const auto at = [&](Phase p, std::string process, std::string layer, std::string what,
                      std::string_view m) {
    return o.values.at({p, std::move(process), std::move(layer), std::move(what), std::string(m)});
  };
  EXPECT_EQ(at(Phase::kSteady, "rank:0", "cuda", "cudaLaunchKernel", kTailLatency).value, 4000);
  EXPECT_EQ(at(Phase::kSteady, "rank:0", "cuda", "cudaLaunchKernel", kTailLatency).count, 5000u);
  // A lower bound takes P10 of the windows: 1000 + 10 * (0.1 * 19).
  EXPECT_DOUBLE_EQ(at(Phase::kSteady, "rank:0", "all", "all calls", kCallRate).value, 1019);
  EXPECT_EQ(at(Phase::kSteady, "rank:0", "all", "all calls", kCallRate).windows, 20u);
  EXPECT_DOUBLE_EQ(at(Phase::kSteady, "rank:0", "memory", "device memory", kDeviceMemory).value,
                   100 * kMiB);
  EXPECT_DOUBLE_EQ(at(Phase::kSteady, "job", "gpu", "device 0", kGpuUtilization).value, 60);
  // Whole-run counts, per job, over the run's 10 s.
  EXPECT_DOUBLE_EQ(at(Phase::kRun, "job", "os", "MAP_POPULATE mmaps", kEventRate).value, 1.2);
  // Every anomaly kind that matters on an active layer is there, at 0; none for inactive layers.
  EXPECT_EQ(at(Phase::kRun, "job", "nccl", "hang", kAnomalyRate).value, 0);
  EXPECT_EQ(at(Phase::kRun, "job", "os", "oom_kill", kAnomalyRate).value, 0);
  EXPECT_EQ(o.values.count({Phase::kRun, "job", "gpu", "xid", std::string(kAnomalyRate)}), 0u);
}

TEST(SloFit, ThresholdsAreTheWorstHealthyValuePlusTheLargerOfToleranceAndSpread) {
  const Slo slo = healthy_slo();
  EXPECT_EQ(slo.runs, (std::vector<std::string>{"h1", "h2", "h3"}));

  const Objective* latency = find(slo, Phase::kSteady, kTailLatency, "cudaLaunchKernel");
  ASSERT_NE(latency, nullptr);
  EXPECT_EQ(latency->bound, Bound::kUpper);
  EXPECT_EQ(latency->unit, "ns");
  // 4200 + max(0.5 * 4200, 4200 - 4000).
  EXPECT_DOUBLE_EQ(latency->threshold, 6300);
  EXPECT_EQ(latency->values, (std::vector<double>{4000, 4200, 4100}));
  EXPECT_EQ(latency->counts, (std::vector<uint64_t>{5000, 5000, 5000}));
  EXPECT_EQ(objective_id(latency->key), "steady/p90_latency/cuda/cudaLaunchKernel/rank:0");

  // Lower bound: the lowest P10 (917.1) less max(0.5 * 917.1, spread 1120.9 - 917.1).
  const Objective* pace = find(slo, Phase::kSteady, kCallRate, "all calls");
  ASSERT_NE(pace, nullptr);
  EXPECT_EQ(pace->bound, Bound::kLower);
  EXPECT_NEAR(pace->threshold, 917.1 - 0.5 * 917.1, 1e-9);
  EXPECT_EQ(objective_id(pace->key), "steady/calls_per_s/all/all_calls/rank:0");

  // Identical healthy runs: the spread is 0, the tolerance alone makes the margin.
  const Objective* memory = find(slo, Phase::kSteady, kDeviceMemory, "device memory");
  ASSERT_NE(memory, nullptr);
  EXPECT_NEAR(memory->threshold, 110 * kMiB, 1);
  const Objective* util = find(slo, Phase::kSteady, kGpuUtilization, "device 0");
  ASSERT_NE(util, nullptr);
  EXPECT_DOUBLE_EQ(util->threshold, 48);

  // No hang in a healthy run: any hang at all violates.
  const Objective* hang = find(slo, Phase::kRun, kAnomalyRate, "hang");
  ASSERT_NE(hang, nullptr);
  EXPECT_EQ(hang->threshold, 0);
  EXPECT_EQ(hang->key.layer, "nccl");
  EXPECT_EQ(hang->key.process, "job");
  // 1.2/s + 50 %; above the floor of 10 events over the shortest run (1/s).
  const Objective* populate = find(slo, Phase::kRun, kEventRate, "MAP_POPULATE mmaps");
  ASSERT_NE(populate, nullptr);
  EXPECT_NEAR(populate->threshold, 1.8, 1e-12);

  // The start-up phase has its own baseline.
  const Objective* startup = find(slo, Phase::kStartup, kTailLatency, "cudaMalloc");
  ASSERT_NE(startup, nullptr);
  EXPECT_DOUBLE_EQ(startup->threshold, 45000);
}

TEST(SloFit, TooLittleDataIsSkippedWithTheReason) {
  const Slo slo = healthy_slo();
  const Skipped* few_calls = find_skipped(slo, Phase::kSteady, kTailLatency, "cudaMalloc");
  ASSERT_NE(few_calls, nullptr);
  EXPECT_NE(few_calls->reason.find("50 calls in h1"), std::string::npos) << few_calls->reason;
  EXPECT_NE(few_calls->reason.find("at least 100"), std::string::npos) << few_calls->reason;
  const Skipped* few_windows = find_skipped(slo, Phase::kStartup, kCallRate, "all calls");
  ASSERT_NE(few_windows, nullptr);
  EXPECT_NE(few_windows->reason.find("2 windows"), std::string::npos) << few_windows->reason;

  // Seen in one run only: not fitted.
  SessionMeasure extra = run("h2", 4200);
  extra.steady_tails[metric("rank:0", "cuda", "cudaMemcpy", compare::kLatency)] = {9000, 1000, 20};
  const Slo partial = fit({observe(run("h1", 4000)), observe(extra)}, options());
  const Skipped* unseen = find_skipped(partial, Phase::kSteady, kTailLatency, "cudaMemcpy");
  ASSERT_NE(unseen, nullptr);
  EXPECT_NE(unseen->reason.find("not seen in h1"), std::string::npos) << unseen->reason;

  // An idle GPU (0 %) gives no lower bound.
  SessionMeasure idle = run("i", 4000);
  idle.steady.metrics[metric("job", "gpu", "device 0", compare::kGpuUtil)].windows.assign(20, 0);
  const Slo idle_slo = fit({observe(idle)}, options());
  EXPECT_EQ(find(idle_slo, Phase::kSteady, kGpuUtilization, "device 0"), nullptr);
  EXPECT_NE(find_skipped(idle_slo, Phase::kSteady, kGpuUtilization, "device 0"), nullptr);

  // A few events over a short run: the floor of 10 events over the shortest run holds.
  SessionMeasure quiet = run("q", 4000);
  quiet.steady.metrics[metric("rank:0", "os", "MAP_POPULATE mmaps", compare::kEventRate)].count = 1;
  const Slo quiet_slo = fit({observe(quiet)}, options());
  EXPECT_DOUBLE_EQ(find(quiet_slo, Phase::kRun, kEventRate, "MAP_POPULATE mmaps")->threshold, 1.0);

  // --tolerance replaces every metric's own.
  FitOptions loose = options();
  loose.tolerance = 2.0;
  const Slo loose_slo = fit({observe(run("h1", 4000))}, loose);
  EXPECT_DOUBLE_EQ(find(loose_slo, Phase::kSteady, kTailLatency, "cudaLaunchKernel")->threshold,
                   12000);
}

TEST(SloCheck, HealthyRunsHoldAndChangesViolateByHowMuch) {
  const Slo slo = healthy_slo();
  const SessionVerdicts healthy = check(slo, observe(run("h4", 4150)));
  EXPECT_EQ(healthy.violated(), 0u);
  for (const Verdict& v : healthy.verdicts) {
    EXPECT_EQ(v.state, Verdict::State::kHeld) << objective_id(v.objective->key) << " " << v.reason;
  }

  // Launches five times slower, a leak, and a hang.
  SessionMeasure bad = run("bad", 21000, 1.0, 200 * kMiB);
  bad.steady.metrics[metric("rank:1", "nccl", "hang", compare::kAnomalyRate)] = {{}, 1, 0};
  const SessionVerdicts verdicts = check(slo, observe(bad));
  EXPECT_EQ(verdicts.violated(), 3u);
  // Worst first: the hang (past a threshold of 0), then the latency (x3.33), then the memory
  // (x1.8).
  ASSERT_GE(verdicts.verdicts.size(), 3u);
  EXPECT_EQ(verdicts.verdicts[0].objective->key.what, "hang");
  EXPECT_TRUE(std::isinf(excess_ratio(*verdicts.verdicts[0].objective, 0.1)));
  const Verdict& latency = verdicts.verdicts[1];
  EXPECT_EQ(latency.state, Verdict::State::kViolated);
  EXPECT_EQ(latency.objective->key.what, "cudaLaunchKernel");
  EXPECT_DOUBLE_EQ(latency.observed->value, 21000);
  EXPECT_NEAR(excess_ratio(*latency.objective, 21000), 21000.0 / 6300, 1e-12);
  EXPECT_EQ(verdicts.verdicts[2].objective->key.metric, kDeviceMemory);

  const std::string text = verdicts_text(slo, "slo.json", {healthy, verdicts});
  EXPECT_NE(text.find("h4: every objective holds"), std::string::npos) << text;
  EXPECT_NE(text.find("bad: VIOLATED: 3 of"), std::string::npos) << text;
  EXPECT_NE(text.find("cuda cudaLaunchKernel [rank:0] steady p90 latency: 21.00 us, above the "
                      "threshold 6.30 us by 14.70 us (x3.33); healthy runs: 4.00 us, 4.20 us, "
                      "4.10 us"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("verdict: 1 of 2 sessions violate the SLO"), std::string::npos) << text;

  const auto j = verdicts_json(slo, "slo.json", {healthy, verdicts});
  EXPECT_EQ(j["verdict"], "violated");
  EXPECT_EQ(j["sessions"][0]["violated"], 0);
  const auto& v = j["sessions"][1]["violations"][1];
  EXPECT_EQ(v["id"], "steady/p90_latency/cuda/cudaLaunchKernel/rank:0");
  EXPECT_EQ(v["observed"], 21000.0);
  EXPECT_EQ(v["threshold"], 6300.0);
  EXPECT_EQ(v["by"], 14700.0);
  EXPECT_EQ(v["bound"], "upper");
  EXPECT_EQ(v["healthy"]["runs"], nlohmann::ordered_json({"h1", "h2", "h3"}));
  EXPECT_TRUE(j["sessions"][1]["violations"][0]["ratio"].is_null());  // past a threshold of 0
}

// NCCL: rank 1's lateness (per-window medians, ns) and ncclAllReduce's bandwidth (GB/s) over 20
// windows, `late_ns` and `gbps` in every window but the last two, which are twice as bad.
SessionMeasure nccl_run(const std::string& dir, double late_ns, double gbps) {
  SessionMeasure m = run(dir, 4000);
  std::vector<double> late(20, late_ns), bandwidth(20, gbps);
  late[18] = late[19] = 2 * late_ns;
  bandwidth[18] = bandwidth[19] = gbps / 2;
  m.steady.metrics[metric("rank:1", "nccl", "all collectives", compare::kLateness)] = {late, 600,
                                                                                       0};
  m.steady.metrics[metric("rank:1", "nccl", "ncclAllReduce", compare::kBandwidth)] = {bandwidth,
                                                                                      500, 0};
  return m;
}

TEST(SloFit, NcclLatenessHasAMillisecondFloorAndBandwidthALowerBound) {
  const Observed o = observe(nccl_run("r", 50e3, 10));
  // P90 of the windows for the upper bound (the two bad windows are the top tenth), P10 for the
  // lower one.
  const auto value = [&o](std::string what, std::string_view metric_name) {
    return o.values
        .at({Phase::kSteady, "rank:1", "nccl", std::move(what), std::string(metric_name)})
        .value;
  };
  EXPECT_NEAR(value("all collectives", kCollectiveLateness), 50e3 + 0.1 * 50e3, 1e-6);
  EXPECT_NEAR(value("ncclAllReduce", kNcclBandwidth), 10 - 0.1 * 5, 1e-9);

  const Slo slo =
      fit({observe(nccl_run("h1", 50e3, 10)), observe(nccl_run("h2", 40e3, 12))}, options());
  const Objective* late = find(slo, Phase::kSteady, kCollectiveLateness, "all collectives");
  ASSERT_NE(late, nullptr);
  EXPECT_EQ(late->bound, Bound::kUpper);
  // 55 us + 50 % is 82.5 us: microseconds of jitter, raised to the floor.
  EXPECT_DOUBLE_EQ(late->threshold, 1e6);
  EXPECT_NE(late->rule.find("raised to 1.00 ms"), std::string::npos) << late->rule;
  const Objective* bw = find(slo, Phase::kSteady, kNcclBandwidth, "ncclAllReduce");
  ASSERT_NE(bw, nullptr);
  EXPECT_EQ(bw->bound, Bound::kLower);
  EXPECT_EQ(bw->unit, "GB/s");
  EXPECT_DOUBLE_EQ(bw->threshold, 9.5 - 0.5 * 9.5);  // the lowest P10 less half of it

  // A healthy run with twice the jitter holds; a rank 3 ms late at every collective, or an
  // all-reduce at a third of its bandwidth, violates.
  EXPECT_EQ(check(slo, observe(nccl_run("h3", 100e3, 11))).violated(), 0u);
  const SessionVerdicts straggler = check(slo, observe(nccl_run("late", 3e6, 10)));
  ASSERT_EQ(straggler.violated(), 1u);
  EXPECT_EQ(straggler.verdicts[0].objective->key.metric, kCollectiveLateness);
  const SessionVerdicts slow = check(slo, observe(nccl_run("slow", 50e3, 3)));
  ASSERT_EQ(slow.violated(), 1u);
  EXPECT_EQ(slow.verdicts[0].objective->key.metric, kNcclBandwidth);

  // serve has no lateness series: a comment, not a rule.
  RulesOptions ro;
  const std::string rules = render_rules(slo, ro);
  EXPECT_NE(rules.find("not its lateness"), std::string::npos) << rules;
}

// Healthy runs that spread more than their lowest value would leave a lower bound of 0: skipped,
// saying why, never an objective that holds nothing.
TEST(SloFit, ALowerBoundTheMarginTakesToZeroIsSkipped) {
  const Slo slo =
      fit({observe(nccl_run("a", 50e3, 2)), observe(nccl_run("b", 50e3, 12))}, options());
  EXPECT_EQ(find(slo, Phase::kSteady, kNcclBandwidth, "ncclAllReduce"), nullptr);
  const Skipped* s = find_skipped(slo, Phase::kSteady, kNcclBandwidth, "ncclAllReduce");
  ASSERT_NE(s, nullptr);
  EXPECT_NE(s->reason.find("lower bound of 0"), std::string::npos) << s->reason;
  // The lateness of the same runs is still an objective.
  EXPECT_NE(find(slo, Phase::kSteady, kCollectiveLateness, "all collectives"), nullptr);
}

TEST(SloCheck, MissingDataIsNotJudgedButASilentProcessViolates) {
  const Slo slo = healthy_slo();
  SessionMeasure m = run("short", 4000);
  m.steady_tails[metric("rank:0", "cuda", "cudaLaunchKernel", compare::kLatency)].calls = 20;
  m.steady.metrics.erase(metric("job", "gpu", "device 0", compare::kGpuUtil));
  m.steady.metrics.erase(metric("rank:0", "all", "all calls", compare::kPace));
  const SessionVerdicts v = check(slo, observe(m));
  size_t not_judged = 0;
  for (const Verdict& x : v.verdicts) {
    const std::string id = objective_id(x.objective->key);
    if (x.objective->key.metric == kCallRate && x.objective->key.phase == Phase::kSteady) {
      EXPECT_EQ(x.state, Verdict::State::kViolated) << id;  // rank:0 made no calls: rate 0
    } else if (id == "steady/p90_latency/cuda/cudaLaunchKernel/rank:0") {
      EXPECT_EQ(x.state, Verdict::State::kNotJudged) << id;
      EXPECT_NE(x.reason.find("20 calls"), std::string::npos) << x.reason;
      ++not_judged;
    } else if (id == "steady/utilization/gpu/device_0/job") {
      EXPECT_EQ(x.state, Verdict::State::kNotJudged) << id;
      ++not_judged;
    } else {
      EXPECT_EQ(x.state, Verdict::State::kHeld) << id;
    }
  }
  EXPECT_EQ(not_judged, 2u);
  EXPECT_EQ(v.violated(), 1u);
}

// Per-API objectives: rank 0 of run() calls `what` at `share` percent of its calls in every
// steady window (so at share % of its pace: share % of 1000 to 1190 calls/s), `calls` times in
// the phase; for a torch operator, with a median self time of `self_ns` in its windows but two in
// the middle, which are twice as slow, and the first, which holds the operator's first call alone
// (ten times as slow: the lazy set-up of a first call).
void add_api(SessionMeasure& m, const std::string& layer, const std::string& what, double share,
             uint64_t calls, double self_ns = 0) {
  m.steady.metrics[metric("rank:0", layer, what, compare::kShare)] = {
      std::vector<double>(20, share), calls, 0};
  if (self_ns > 0) {
    std::vector<double> self(20, self_ns);
    self[0] = 10 * self_ns;
    self[9] = self[10] = 2 * self_ns;
    m.steady.metrics[metric("rank:0", layer, what, compare::kSelfTime)] = {self, calls, 0};
  }
}

// Three healthy runs at three paces (0.9, 1.0 and 1.1 times run()'s) whose launches are 36 % of
// their calls, cudaMalloc 1 %, cudaMemcpy 0.1 % (100 calls over the run: a rate of a few calls a
// window), and aten::conv2d 5 % with a median self time of 50, 55 and 52 us.
Slo per_api_slo() {
  std::vector<Observed> runs;
  const double paces[] = {1.0, 0.9, 1.1};
  const double self[] = {50e3, 55e3, 52e3};
  for (int i = 0; i < 3; ++i) {
    SessionMeasure m = run(fmt::format("h{}", i + 1), 4000, paces[i]);
    add_api(m, "cuda", "cudaLaunchKernel", 36, 7200);
    add_api(m, "cuda", "cudaMalloc", 1, 200);
    add_api(m, "cuda", "cudaMemcpy", 0.1, 20);
    add_api(m, "torch", "aten::conv2d", 5, 1000, self[i]);
    runs.push_back(observe(m));
  }
  return fit(runs, options());
}

TEST(SloStatistics, AnApisRateIsItsShareOfThePace) {
  // run()'s pace is 1000 + 10 i calls/s in window i; launches are 36 % of the calls: their rate's
  // P10 is 36 % of the pace's (1019), their share's P90 is 36 %.
  SessionMeasure m = run("r", 4000);
  add_api(m, "cuda", "cudaLaunchKernel", 36, 7200);
  const Observed o = observe(m);
  const auto at = [&](std::string_view name) {
    return o.values.at({Phase::kSteady, "rank:0", "cuda", "cudaLaunchKernel", std::string(name)});
  };
  EXPECT_NEAR(at(kCallRate).value, 0.36 * 1019, 1e-9);
  EXPECT_EQ(at(kCallRate).count, 7200u);
  EXPECT_EQ(at(kCallRate).windows, 20u);
  EXPECT_DOUBLE_EQ(at(kCallShare).value, 36);

  // A window in which the process made no call has a pace of 0 and no share: the API's rate
  // there is 0, and the shares of the other windows stay with their own windows.
  SessionMeasure gap;
  gap.dir = "gap";
  gap.seconds = 2;
  gap.steady.metrics[metric("rank:0", "all", "all calls", compare::kPace)] = {
      {100, 0, 200, 300}, 300, 0};
  gap.steady.metrics[metric("rank:0", "cuda", "cudaMalloc", compare::kShare)] = {
      {10, 50, 20}, 80, 0};
  const Observed g = observe(gap);
  const Observation rate =
      g.values.at({Phase::kSteady, "rank:0", "cuda", "cudaMalloc", std::string(kCallRate)});
  EXPECT_EQ(rate.windows, 4u);
  // The rates are 10, 0, 100 and 60 a second: P10 is 0 + 0.3 * (10 - 0).
  EXPECT_DOUBLE_EQ(rate.value, 3);
  // Shares that do not line up with the pace's windows give no rate (never a shifted one).
  gap.steady.metrics[metric("rank:0", "cuda", "cudaMalloc", compare::kShare)].windows.push_back(5);
  EXPECT_EQ(observe(gap).values.count(
                {Phase::kSteady, "rank:0", "cuda", "cudaMalloc", std::string(kCallRate)}),
            0u);
}

TEST(SloStatistics, ASelfTimeLeavesOutItsFirstAndLastWindowsWhenThereAreMoreThanFour) {
  auto self_time = [](std::vector<double> windows) {
    SessionMeasure m;
    m.dir = "r";
    m.seconds = 1;
    m.steady.metrics[metric("rank:0", "torch", "aten::mm", compare::kSelfTime)] = {windows, 500, 0};
    return observe(m).values.at(
        {Phase::kSteady, "rank:0", "torch", "aten::mm", std::string(kSelfTime)});
  };
  // Five windows: the first (a lone, slow first call) and the last are cut, P90 of 1, 2, 3.
  const Observation five = self_time({100, 1, 2, 3, 50});
  EXPECT_DOUBLE_EQ(five.value, 2.8);
  EXPECT_EQ(five.windows, 3u);
  EXPECT_EQ(five.count, 500u);
  // Four: too few to spare any, P90 of all.
  EXPECT_DOUBLE_EQ(self_time({1, 2, 3, 100}).value, 3 + 0.7 * 97);
}

TEST(SloFit, EachApisCallRateHasALowerBoundAndItsShareAnUpperOne) {
  const Slo slo = per_api_slo();
  const Objective* rate = find(slo, Phase::kSteady, kCallRate, "cudaLaunchKernel");
  ASSERT_NE(rate, nullptr);
  EXPECT_EQ(rate->bound, Bound::kLower);
  EXPECT_EQ(rate->unit, "/s");
  EXPECT_EQ(objective_id(rate->key), "steady/calls_per_s/cuda/cudaLaunchKernel/rank:0");
  // The lowest P10 (the run at 0.9: 0.36 * 917.1) less the larger of half of it and the spread
  // (0.36 * (1120.9 - 917.1)).
  EXPECT_NEAR(rate->threshold, 0.5 * 0.36 * 917.1, 1e-9);
  const Objective* share = find(slo, Phase::kSteady, kCallShare, "cudaLaunchKernel");
  ASSERT_NE(share, nullptr);
  EXPECT_EQ(share->bound, Bound::kUpper);
  EXPECT_EQ(share->unit, "%");
  EXPECT_DOUBLE_EQ(share->threshold, 54);  // 36 % and half again: the pace does not move it
  EXPECT_EQ(objective_id(share->key), "steady/share_of_calls/cuda/cudaLaunchKernel/rank:0");
  // The process's own rate is still there, as before.
  EXPECT_NE(find(slo, Phase::kSteady, kCallRate, "all calls"), nullptr);

  // Too few calls to judge: an API with 20 calls a run has neither objective, and says why.
  EXPECT_EQ(find(slo, Phase::kSteady, kCallRate, "cudaMemcpy"), nullptr);
  const Skipped* few = find_skipped(slo, Phase::kSteady, kCallRate, "cudaMemcpy");
  ASSERT_NE(few, nullptr);
  EXPECT_NE(few->reason.find("20 calls in h1: an API's call rate needs at least 100"),
            std::string::npos)
      << few->reason;
  const Skipped* few_share = find_skipped(slo, Phase::kSteady, kCallShare, "cudaMemcpy");
  ASSERT_NE(few_share, nullptr);
  EXPECT_NE(few_share->reason.find("a share of calls needs at least 100"), std::string::npos);
  // cudaMalloc, with 200 calls, has both.
  EXPECT_NE(find(slo, Phase::kSteady, kCallRate, "cudaMalloc"), nullptr);
  EXPECT_NE(find(slo, Phase::kSteady, kCallShare, "cudaMalloc"), nullptr);

  // A process whose calls are mostly one API: a bound of its share at 100 % or more holds
  // nothing, and is skipped, saying why.
  SessionMeasure most = run("m", 4000);
  add_api(most, "cuda", "cudaLaunchKernel", 80, 16000);
  const Slo most_slo = fit({observe(most)}, options());
  EXPECT_EQ(find(most_slo, Phase::kSteady, kCallShare, "cudaLaunchKernel"), nullptr);
  const Skipped* full = find_skipped(most_slo, Phase::kSteady, kCallShare, "cudaLaunchKernel");
  ASSERT_NE(full, nullptr);
  EXPECT_NE(full->reason.find("100 % or more"), std::string::npos) << full->reason;
  EXPECT_NE(find(most_slo, Phase::kSteady, kCallRate, "cudaLaunchKernel"), nullptr);
}

TEST(SloCheck, ARateDropOrAStormViolatesOnlyItsApisObjectives) {
  const Slo slo = per_api_slo();
  auto candidate = [](const std::string& dir, double pace, double launch_share,
                      double malloc_share) {
    SessionMeasure m = run(dir, 4000, pace);
    add_api(m, "cuda", "cudaLaunchKernel", launch_share, 7200);
    add_api(m, "cuda", "cudaMalloc", malloc_share, 200);
    add_api(m, "cuda", "cudaMemcpy", 0.1, 20);
    add_api(m, "torch", "aten::conv2d", 5, 1000, 53e3);
    return observe(m);
  };
  auto violated = [&](const Observed& o) {
    std::vector<std::string> ids;
    const SessionVerdicts v = check(slo, o);
    for (const Verdict& x : v.verdicts) {
      if (x.state == Verdict::State::kViolated) ids.push_back(objective_id(x.objective->key));
    }
    std::sort(ids.begin(), ids.end());
    return ids;
  };
  // A healthy spread: slower than the slowest healthy run (0.8 of the pace) and faster than the
  // fastest (1.4: a job that got faster is no violation), each API at its healthy share.
  EXPECT_EQ(violated(candidate("slower", 0.8, 36, 1)), std::vector<std::string>{});
  EXPECT_EQ(violated(candidate("faster", 1.4, 36, 1)), std::vector<std::string>{});
  // Launches at a third of their share (a third of their rate) while the process keeps its pace:
  // the launch rate drops below its bound, and nothing else.
  EXPECT_EQ(violated(candidate("launches", 1.0, 12, 1)),
            std::vector<std::string>{"steady/calls_per_s/cuda/cudaLaunchKernel/rank:0"});
  // A whole job at a third of its pace: every rate objective, the process's own included, and no
  // share.
  EXPECT_EQ(violated(candidate("stalled", 0.33, 36, 1)),
            (std::vector<std::string>{"steady/calls_per_s/all/all_calls/rank:0",
                                      "steady/calls_per_s/cuda/cudaLaunchKernel/rank:0",
                                      "steady/calls_per_s/cuda/cudaMalloc/rank:0",
                                      "steady/calls_per_s/torch/aten::conv2d/rank:0"}));
  // Ten times the cudaMalloc calls: its share of calls from 1 % to about 9 %.
  EXPECT_EQ(violated(candidate("storm", 1.0, 33, 9.2)),
            std::vector<std::string>{"steady/share_of_calls/cuda/cudaMalloc/rank:0"});

  // An API the process no longer calls: a rate of 0, violated, saying so; its share and
  // latency are not seen (not judged).
  SessionMeasure gone = run("gone", 4000);
  add_api(gone, "cuda", "cudaLaunchKernel", 36, 7200);
  add_api(gone, "torch", "aten::conv2d", 5, 1000, 53e3);
  const SessionVerdicts v = check(slo, observe(gone));
  ASSERT_EQ(v.violated(), 1u);
  EXPECT_EQ(objective_id(v.verdicts[0].objective->key),
            "steady/calls_per_s/cuda/cudaMalloc/rank:0");
  EXPECT_EQ(v.verdicts[0].reason, "no calls of this API in this phase");
  const std::string text = verdicts_text(slo, "slo.json", {v});
  EXPECT_NE(text.find("cuda cudaMalloc [rank:0] steady calls/s: 0 /s, below the threshold"),
            std::string::npos)
      << text;
}

TEST(SloFit, TorchOperatorsSelfTimeHasAnUpperBound) {
  const Slo slo = per_api_slo();
  const Objective* self = find(slo, Phase::kSteady, kSelfTime, "aten::conv2d");
  ASSERT_NE(self, nullptr);
  EXPECT_EQ(self->key.layer, "torch");
  EXPECT_EQ(self->bound, Bound::kUpper);
  EXPECT_EQ(self->unit, "ns");
  EXPECT_EQ(self->statistic, "P90 of the windows' median self time, the first and last left out");
  // P90 of the windows but the first and the last (as compare cuts a process's rates): of the
  // 18 left, the two slow ones are the top ninth, so 1.3 times the median (65, 71.5, 67.6 us);
  // the lone first call's window does not count. The threshold: the highest plus half of it.
  EXPECT_NEAR(self->values[0], 65e3, 1e-6);
  EXPECT_NEAR(self->values[1], 71.5e3, 1e-6);
  EXPECT_EQ(self->counts[0], 1000u);
  EXPECT_NEAR(self->threshold, 1.5 * 71.5e3, 1e-6);
  EXPECT_EQ(objective_id(self->key), "steady/self_time/torch/aten::conv2d/rank:0");

  // Verdicts point into their Slo: it outlives them.
  const Slo fitted = per_api_slo();
  auto with_self = [&fitted](const std::string& dir, double self_ns, uint64_t calls) {
    SessionMeasure m = run(dir, 4000);
    add_api(m, "cuda", "cudaLaunchKernel", 36, 7200);
    add_api(m, "cuda", "cudaMalloc", 1, 200);
    add_api(m, "torch", "aten::conv2d", 5, calls, self_ns);
    return check(fitted, observe(m));
  };
  // Within the healthy spread: held. Twice the slowest healthy self time: violated, alone.
  EXPECT_EQ(with_self("ok", 56e3, 1000).violated(), 0u);
  const SessionVerdicts slow = with_self("slow", 110e3, 1000);
  ASSERT_EQ(slow.violated(), 1u);
  EXPECT_EQ(slow.verdicts[0].objective->key.metric, kSelfTime);
  EXPECT_NEAR(slow.verdicts[0].observed->value, 143e3, 1e-6);
  // Too few calls in the session: a self time over them is not judged.
  const SessionVerdicts few = with_self("few", 110e3, 30);
  for (const Verdict& x : few.verdicts) {
    if (x.objective->key.metric != kSelfTime) continue;
    EXPECT_EQ(x.state, Verdict::State::kNotJudged);
    EXPECT_EQ(x.reason, "30 calls: a self time needs at least 100");
  }

  // A self time of a few microseconds (a wrapper whose self time is mostly the probes of the
  // calls nested in it) never gets a threshold below 20 us.
  SessionMeasure wrapper = run("w", 4000);
  add_api(wrapper, "torch", "aten::nll_loss", 3, 400, 3e3);
  const Slo wrapper_slo = fit({observe(wrapper)}, options());
  const Objective* floor = find(wrapper_slo, Phase::kSteady, kSelfTime, "aten::nll_loss");
  ASSERT_NE(floor, nullptr);
  EXPECT_DOUBLE_EQ(floor->threshold, 20e3);
  EXPECT_NE(floor->rule.find("raised to 20.00 us"), std::string::npos) << floor->rule;

  // Too few calls in a healthy run: skipped, saying why.
  SessionMeasure rare = run("rare", 4000);
  add_api(rare, "torch", "aten::conv2d", 5, 60, 50e3);
  const Slo rare_slo = fit({observe(rare)}, options());
  EXPECT_EQ(find(rare_slo, Phase::kSteady, kSelfTime, "aten::conv2d"), nullptr);
  const Skipped* s = find_skipped(rare_slo, Phase::kSteady, kSelfTime, "aten::conv2d");
  ASSERT_NE(s, nullptr);
  EXPECT_NE(s->reason.find("60 calls in rare: a self time needs at least 100"), std::string::npos)
      << s->reason;
}

TEST(SloRules, PerApiRatesSharesAndSelfTimesAreComments) {
  const std::string rules = render_rules(per_api_slo(), {"slo.json", 300, 300});
  // serve's call counters have no process, and its histograms no self time: no rule, a reason.
  EXPECT_NE(rules.find("#   steady/calls_per_s/cuda/cudaLaunchKernel/rank:0 (threshold"),
            std::string::npos)
      << rules;
  EXPECT_NE(rules.find("#   steady/share_of_calls/cuda/cudaLaunchKernel/rank:0 (threshold 54.0 "
                       "%): serve's call counters carry no process"),
            std::string::npos)
      << rules;
  EXPECT_NE(rules.find("#   steady/self_time/torch/aten::conv2d/rank:0 (threshold"),
            std::string::npos)
      << rules;
  EXPECT_NE(rules.find("not its self time"), std::string::npos) << rules;
  EXPECT_EQ(rules.find("eacgm_calls_total"), std::string::npos) << rules;
}

TEST(SloFile, APerApiFileRoundTripsAndAnOlderFileStillLoads) {
  const Slo slo = per_api_slo();
  auto back = from_json(nlohmann::json::parse(to_json(slo).dump()));
  ASSERT_TRUE(back.ok()) << back.error().message;
  ASSERT_EQ(back->objectives.size(), slo.objectives.size());
  EXPECT_NE(find(*back, Phase::kSteady, kSelfTime, "aten::conv2d"), nullptr);
  EXPECT_NE(find(*back, Phase::kSteady, kCallShare, "cudaMalloc"), nullptr);
  // A file written before per-API objectives (version 1, the same fields) reads as it did.
  const auto older = nlohmann::json::parse(R"({"version": 1,
    "windows": {"startup_s": 1, "startup_window_s": 0.1, "steady_window_s": 0.5},
    "objectives": [{"id": "steady/calls_per_s/all/all_calls/rank:0", "what": "all calls",
      "layer": "all", "process": "rank:0", "metric": "calls/s", "unit": "/s", "bound": "lower",
      "threshold": 450, "window": {"phase": "steady", "from_s": 1, "to_s": null,
      "length_s": 0.5}}]})");
  auto old = from_json(older);
  ASSERT_TRUE(old.ok()) << old.error().message;
  ASSERT_EQ(old->objectives.size(), 1u);
  EXPECT_EQ(check(*old, observe(run("h", 4000))).violated(), 0u);
}

TEST(SloFile, RoundTripKeepsEveryObjectiveAndVerdict) {
  const Slo slo = healthy_slo();
  const std::string text = to_json(slo).dump(2);
  auto back = from_json(nlohmann::json::parse(text));
  ASSERT_TRUE(back.ok()) << back.error().message;
  ASSERT_EQ(back->objectives.size(), slo.objectives.size());
  for (size_t i = 0; i < slo.objectives.size(); ++i) {
    const Objective& a = slo.objectives[i];
    const Objective& b = back->objectives[i];
    EXPECT_EQ(a.key, b.key);
    EXPECT_EQ(a.bound, b.bound);
    EXPECT_DOUBLE_EQ(a.threshold, b.threshold);
    EXPECT_EQ(a.unit, b.unit);
    EXPECT_EQ(a.values, b.values);
    EXPECT_EQ(a.runs, b.runs);
  }
  EXPECT_EQ(back->skipped.size(), slo.skipped.size());
  EXPECT_DOUBLE_EQ(back->windows.startup_s, 1.0);
  EXPECT_DOUBLE_EQ(back->windows.steady_window_s, 0.5);
  EXPECT_EQ(back->runs, slo.runs);
  EXPECT_EQ(to_json(*back).dump(2), text);  // and writing it again changes nothing

  // What a reader looks for is there, by name.
  const auto j = nlohmann::json::parse(text);
  EXPECT_EQ(j["version"], 1);
  const auto& o = j["objectives"][0];
  for (const char* field : {"id", "what", "layer", "process", "metric", "unit", "bound",
                            "threshold", "window", "evidence"}) {
    EXPECT_TRUE(o.contains(field)) << field;
  }
  EXPECT_TRUE(j["skipped"][0].contains("reason"));
}

TEST(SloFile, BadFilesAreOneLineErrors) {
  const std::string good = to_json(healthy_slo()).dump();
  auto error_of = [](const std::string& text) {
    auto slo = from_json(nlohmann::json::parse(text));
    EXPECT_FALSE(slo.ok()) << text.substr(0, 200);
    return slo.ok() ? std::string() : slo.error().message;
  };
  auto j = nlohmann::json::parse(good);
  j["version"] = 2;
  EXPECT_NE(error_of(j.dump()).find("SLO file version 2; this eacgm reads version 1"),
            std::string::npos);
  j.erase("version");
  EXPECT_NE(error_of(j.dump()).find("no \"version\""), std::string::npos);
  j = nlohmann::json::parse(good);
  j["objectives"][2].erase("threshold");
  EXPECT_EQ(error_of(j.dump()), "objective 3 has no \"threshold\" number");
  j = nlohmann::json::parse(good);
  j["objectives"][0]["bound"] = "sideways";
  EXPECT_NE(error_of(j.dump()).find("objective 1 has bound \"sideways\""), std::string::npos);
  j = nlohmann::json::parse(good);
  j["objectives"][0]["metric"] = "happiness";
  EXPECT_NE(error_of(j.dump()).find("a metric this eacgm does not know"), std::string::npos);
  j = nlohmann::json::parse(good);
  j["objectives"][0]["window"]["phase"] = "lunch";
  EXPECT_NE(error_of(j.dump()).find("unknown phase \"lunch\""), std::string::npos);
  j = nlohmann::json::parse(good);
  j.erase("objectives");
  EXPECT_EQ(error_of(j.dump()), "no \"objectives\" list");
  EXPECT_NE(error_of("[1, 2]").find("not a JSON object"), std::string::npos);

  const auto dir = std::filesystem::temp_directory_path() / fmt::format("slo_test_{}", ::getpid());
  std::filesystem::create_directories(dir);
  const std::string missing = (dir / "missing.json").string();
  auto r = read_slo_file(missing);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("no SLO file " + missing), std::string::npos);
  const std::string corrupt = (dir / "corrupt.json").string();
  std::ofstream(corrupt) << good.substr(0, good.size() / 2);
  r = read_slo_file(corrupt);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("is not JSON"), std::string::npos);
  EXPECT_EQ(r.error().message.find('\n'), std::string::npos);
  const std::string ok = (dir / "ok.json").string();
  std::ofstream(ok) << good;
  EXPECT_TRUE(read_slo_file(ok).ok());
  std::filesystem::remove_all(dir);
}

TEST(SloRules, ObjectivesServeExportsBecomeRulesTheOthersComments) {
  Slo slo = healthy_slo();
  // A second process role for the same API: one rule at the looser threshold.
  Objective other = *find(slo, Phase::kSteady, kTailLatency, "cudaLaunchKernel");
  other.key.process = "rank:1";
  other.threshold = 9000;
  slo.objectives.push_back(other);
  const std::string rules = render_rules(slo, {"slo.json", 300, 300});
  EXPECT_NE(rules.find("groups:\n  - name: eacgm-slo\n    rules:\n"), std::string::npos) << rules;
  EXPECT_NE(rules.find("expr: \"histogram_quantile(0.9, sum by (instance, le) "
                       "(rate(eacgm_call_duration_seconds_bucket{layer=\\\"cuda\\\","
                       "api=\\\"cudaLaunchKernel\\\"}[300s]))) > 9e-06\""),
            std::string::npos)
      << rules;
  EXPECT_EQ(rules.find("> 6.3e-06"), std::string::npos) << rules;  // the tighter one is not used
  EXPECT_NE(rules.find("eacgm_process_device_memory_bytes{rank=\\\"0\\\"}"), std::string::npos);
  EXPECT_NE(rules.find("avg_over_time(eacgm_gpu_util_ratio{device=\\\"0\\\"}[300s]) < 0.48"),
            std::string::npos)
      << rules;
  EXPECT_NE(rules.find("eacgm_anomaly_timestamp_seconds{kind=\\\"hang\\\",layer=\\\"nccl\\\"}"),
            std::string::npos);
  // No serve metric: comments, with the reason.
  EXPECT_NE(rules.find("#   steady/calls_per_s/all/all_calls/rank:0"), std::string::npos) << rules;
  EXPECT_NE(rules.find("#   run/events_per_s/os/MAP_POPULATE_mmaps/job"), std::string::npos);
  EXPECT_NE(rules.find("#   startup/p90_latency/cuda/cudaMalloc/rank:0"), std::string::npos);
  EXPECT_NE(rules.find("      - alert: EacgmSloLatency\n"), std::string::npos) << rules;
}

TEST(SloLatencyPercentile, TheMetricNamesItsPercentile) {
  EXPECT_EQ(tail_latency_metric(kDefaultLatencyPercentile), kTailLatency);
  EXPECT_EQ(tail_latency_metric(99), "p99 latency");
  EXPECT_EQ(tail_latency_percentile("p99 latency"), 99);
  EXPECT_EQ(tail_latency_percentile(kTailLatency), 90);
  EXPECT_EQ(tail_latency_percentile("p50 latency"), 50);
  for (std::string_view other : {"p49 latency", "p100 latency", "p9x latency", "p latency",
                                 "p99 latencies", "calls/s", "self time", ""}) {
    EXPECT_FALSE(tail_latency_percentile(other)) << other;
    EXPECT_FALSE(metric_rule(other) && other.ends_with("latency")) << other;
  }
  ASSERT_TRUE(metric_rule("p99 latency"));
  EXPECT_EQ(metric_rule("p99 latency")->statistic, "p99 of the calls");
  EXPECT_EQ(metric_rule("p99 latency")->bound, Bound::kUpper);
}

TEST(SloLatencyPercentile, AP99FitHoldsP99sFromEndToEnd) {
  // Measured at the 99th percentile (what `slo fit --latency-percentile 99` asks measure_session
  // for), each run's tails are its p99s.
  auto p99_run = [](const std::string& dir, double p99_ns) {
    SessionMeasure m = run(dir, p99_ns);
    m.latency_percentile = 99;
    return observe(m);
  };
  const Observed h1 = p99_run("h1", 9000);
  EXPECT_EQ(h1.values.count(
                {Phase::kSteady, "rank:0", "cuda", "cudaLaunchKernel", std::string(kTailLatency)}),
            0u);
  FitOptions o = options();
  o.windows.latency_percentile = 99;
  const Slo slo = fit({h1, p99_run("h2", 9500), p99_run("h3", 10000)}, o);
  const Objective* latency = find(slo, Phase::kSteady, "p99 latency", "cudaLaunchKernel");
  ASSERT_NE(latency, nullptr);
  EXPECT_EQ(objective_id(latency->key), "steady/p99_latency/cuda/cudaLaunchKernel/rank:0");
  EXPECT_EQ(latency->statistic, "p99 of the calls");
  EXPECT_DOUBLE_EQ(latency->threshold, 15000);  // 10000 + 0.5 * 10000
  EXPECT_EQ(find(slo, Phase::kSteady, kTailLatency, "cudaLaunchKernel"), nullptr);
  // Too few calls for a tail: the reason names it whatever its percentile.
  const Skipped* few = find_skipped(slo, Phase::kSteady, "p99 latency", "cudaMalloc");
  ASSERT_NE(few, nullptr);
  EXPECT_NE(few->reason.find("a tail latency needs at least 100"), std::string::npos)
      << few->reason;

  // The file keeps the percentile, so check measures the same tail.
  auto back = from_json(nlohmann::json::parse(to_json(slo).dump()));
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(back->windows.latency_percentile, 99);
  const SessionVerdicts slow = check(*back, p99_run("slow", 30000));
  ASSERT_GE(slow.verdicts.size(), 1u);
  EXPECT_EQ(slow.verdicts[0].objective->key.metric, "p99 latency");
  EXPECT_EQ(slow.verdicts[0].state, Verdict::State::kViolated);
  EXPECT_EQ(check(*back, p99_run("healthy", 9800)).violated(), 0u);

  // The rule asks Prometheus for the same quantile.
  const std::string rules = render_rules(*back, {"slo.json", 300, 300});
  EXPECT_NE(rules.find("histogram_quantile(0.99, sum by (instance, le)"), std::string::npos)
      << rules;
  EXPECT_NE(rules.find("steady/p99_latency/cuda/cudaLaunchKernel"), std::string::npos) << rules;
  EXPECT_EQ(rules.find("histogram_quantile(0.9,"), std::string::npos) << rules;
}

TEST(SloLatencyPercentile, AFileWithoutOneHoldsP90sAndABadOneIsRefused) {
  nlohmann::json j = nlohmann::json::parse(to_json(healthy_slo()).dump());
  j["windows"].erase("latency_percentile");
  auto old = from_json(j);
  ASSERT_TRUE(old.ok()) << old.error().message;
  EXPECT_EQ(old->windows.latency_percentile, 90);
  for (const nlohmann::json& bad :
       {nlohmann::json(100), nlohmann::json(49), nlohmann::json(99.5), nlohmann::json("99")}) {
    j["windows"]["latency_percentile"] = bad;
    auto r = from_json(j);
    ASSERT_FALSE(r.ok()) << bad.dump();
    EXPECT_NE(r.error().message.find("latency_percentile"), std::string::npos) << r.error().message;
  }
}

}  // namespace
}  // namespace eacgm::slo
