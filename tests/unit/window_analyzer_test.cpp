// The window detectors (latency, throughput, GMM) against synthetic training loops with injected,
// known faults: the fault is found, named (the API, the worker, when) and explained; healthy loops
// (with realistic noise: log-normal durations, rare slow calls) never raise anything.
#include "analysis/window_analyzer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "test_support.h"

namespace eacgm {
namespace {

struct Fault {
  double from_s = 1e9;        // when it starts
  std::string_view api;       // latency: this API...
  double latency_factor = 1;  // ...takes this many times longer
  double period_factor = 1;   // throughput: steps come this many times less often
};
Fault slower(double from_s, std::string_view api, double factor) {
  Fault f;
  f.from_s = from_s;
  f.api = api;
  f.latency_factor = factor;
  return f;
}
Fault stall(double from_s, double period_factor) {
  Fault f;
  f.from_s = from_s;
  f.period_factor = period_factor;
  return f;
}

// A worker stepping every 10 ms for `seconds`: cudaMalloc, 5 launches (~3 us), a sync (~50 us),
// cudaFree, all with log-normal noise and 1 % of calls 5x slower. Calls come in end order.
std::vector<CallSample> loop(uint32_t pid, double seconds, unsigned seed, const Fault& fault = {}) {
  std::mt19937_64 rng(seed);
  std::lognormal_distribution<double> noise(0, 0.2);
  std::uniform_real_distribution<double> u(0, 1);
  std::vector<CallSample> out;
  const uint64_t t0 = 50 * kS;
  uint64_t t = t0;
  int64_t outstanding = 256 << 20;
  while (t < t0 + static_cast<uint64_t>(seconds * 1e9)) {
    const bool faulty = static_cast<double>(t - t0) / 1e9 >= fault.from_s;
    auto emit = [&](std::string_view name, double typical_ns, uint64_t bytes, int64_t delta) {
      double ns = typical_ns * noise(rng) * (u(rng) < 0.01 ? 5 : 1);
      if (faulty && name == fault.api) ns *= fault.latency_factor;
      outstanding += delta;
      CallSample c;
      c.pid = pid;
      c.name = name;
      c.api_class = api_class(c.layer, c.name);
      c.start_ns = t;
      c.duration_ns = static_cast<uint64_t>(ns);
      c.bytes = bytes;
      c.outstanding_bytes = outstanding;
      c.memory_event = delta != 0;
      out.push_back(c);
      t += c.duration_ns + 2000;
    };
    const uint64_t step_start = t;
    emit("cudaMalloc", 6000, 8 << 20, 8 << 20);
    for (int k = 0; k < 5; ++k) emit("cudaLaunchKernel", 3000, 0, 0);
    emit("cudaStreamSynchronize", 50000, 0, 0);
    emit("cudaFree", 4000, 0, -(8 << 20));
    // The next step starts a period after this one (the host's work fills the rest).
    const uint64_t period = static_cast<uint64_t>(10 * kMs * (faulty ? fault.period_factor : 1));
    t = std::max(t, step_start + period);
  }
  return out;
}

struct Verdicts {
  std::vector<Anomaly> anomalies;
  std::vector<Anomaly> of(const std::string& kind) const {
    std::vector<Anomaly> v;
    for (const Anomaly& a : anomalies) {
      if (a.kind == kind) v.push_back(a);
    }
    return v;
  }
};

// Feeds calls as the live recorder does: a tick every 100 ms of their clock.
Verdicts analyze(const std::vector<CallSample>& calls, const DetectorModel* model = nullptr,
                 AnalyzerOptions options = {}) {
  WindowAnalyzer a(options, model);
  a.set_session_start(50 * kS);
  a.set_lookup([](uint32_t pid) {
    return EntityInfo{static_cast<int>(pid % 10), "train", "main"};
  });
  Verdicts r;
  uint64_t clock = 0;
  for (const CallSample& c : calls) {
    a.on_call(c);
    if (c.end_ns() >= clock + 100 * kMs) {
      clock = c.end_ns();
      for (Anomaly& x : a.advance(clock)) r.anomalies.push_back(std::move(x));
    }
  }
  for (Anomaly& x : a.finish(calls.back().end_ns() + kS)) r.anomalies.push_back(std::move(x));
  return r;
}

std::string describe(const Verdicts& r) {
  std::string s;
  for (const Anomaly& a : r.anomalies) s += a.kind + ": " + a.message + "\n";
  return s;
}

TEST(WindowAnalyzer, HealthyLoopsRaiseNothing) {
  for (unsigned seed = 1; seed <= 8; ++seed) {
    const Verdicts r = analyze(loop(3, 60, seed));
    EXPECT_TRUE(r.anomalies.empty()) << "seed " << seed << "\n" << describe(r);
  }
}

TEST(WindowAnalyzer, LatencySpikeNamesTheApiAndWhen) {
  const Verdicts r = analyze(loop(3, 40, 7, slower(25, "cudaLaunchKernel", 40)));
  const auto latency = r.of("latency");
  ASSERT_EQ(latency.size(), 1u) << describe(r);
  const Anomaly& a = latency[0];
  EXPECT_EQ(a.evidence["api"], "cudaLaunchKernel");
  EXPECT_EQ(a.pid, 3u);
  EXPECT_EQ(a.rank, 3);
  EXPECT_EQ(a.layer, Layer::kCuda);
  // The episode starts with the window holding the onset, or the first one wholly after it.
  EXPECT_GE(a.t_s, 24.0);
  EXPECT_LE(a.t_s, 25.01);
  EXPECT_NEAR(a.evidence["ratio"].get<double>(), 40, 8);
  EXPECT_NE(a.message.find("cudaLaunchKernel"), std::string::npos);
  EXPECT_NE(a.suggestion.find("kernel choice"), std::string::npos);
  EXPECT_TRUE(r.of("throughput").empty()) << describe(r);  // steps keep their pace
  // The GMM sees it too, and says which feature moved.
  const auto gmm = r.of("gmm");
  ASSERT_EQ(gmm.size(), 1u) << describe(r);
  EXPECT_EQ(gmm[0].evidence["features"][0]["name"], "launch_latency_log_ns");
  EXPECT_GT(gmm[0].evidence["features"][0]["z"].get<double>(), 10);
}

// A CPU training loop seen only through the torch layer: three operators a step, every 10 ms.
std::vector<CallSample> torch_loop(uint32_t pid, double seconds, unsigned seed,
                                   const Fault& fault = {}) {
  std::mt19937_64 rng(seed);
  std::lognormal_distribution<double> noise(0, 0.2);
  std::vector<CallSample> out;
  const uint64_t t0 = 50 * kS;
  uint64_t t = t0;
  while (t < t0 + static_cast<uint64_t>(seconds * 1e9)) {
    const bool faulty = static_cast<double>(t - t0) / 1e9 >= fault.from_s;
    const uint64_t step_start = t;
    for (auto [name, typical_ns] :
         {std::pair{"aten::convolution", 300e3}, std::pair{"aten::relu", 20e3},
          std::pair{"aten::addmm", 100e3}}) {
      double ns = typical_ns * noise(rng);
      if (faulty && name == fault.api) ns *= fault.latency_factor;
      CallSample c;
      c.pid = pid;
      c.layer = Layer::kTorch;
      c.name = name;
      c.api_class = api_class(c.layer, c.name);
      c.start_ns = t;
      c.duration_ns = static_cast<uint64_t>(ns);
      out.push_back(c);
      t += c.duration_ns + 2000;
    }
    const uint64_t period = static_cast<uint64_t>(10 * kMs * (faulty ? fault.period_factor : 1));
    t = std::max(t, step_start + period);
  }
  return out;
}

bool speaks_of_gpus(const std::string& text) {
  return text.find("GPU") != std::string::npos || text.find("CUDA") != std::string::npos ||
         text.find("kernel choice") != std::string::npos || text.find("pin") != std::string::npos;
}

TEST(WindowAnalyzer, ATorchOperatorsLatencyIsTheTorchLayersWithHostAdvice) {
  const Verdicts r = analyze(torch_loop(4, 40, 3, slower(25, "aten::addmm", 20)));
  const auto latency = r.of("latency");
  ASSERT_EQ(latency.size(), 1u) << describe(r);
  EXPECT_EQ(latency[0].evidence["api"], "aten::addmm");
  EXPECT_EQ(latency[0].layer, Layer::kTorch);
  EXPECT_FALSE(speaks_of_gpus(latency[0].suggestion)) << latency[0].suggestion;
  EXPECT_NE(latency[0].suggestion.find("torch.get_num_threads"), std::string::npos);
  for (const Anomaly& a : r.anomalies) {
    EXPECT_EQ(a.layer, Layer::kTorch) << a.kind << ": " << a.message;
    EXPECT_FALSE(speaks_of_gpus(a.suggestion)) << a.kind << ": " << a.suggestion;
  }
}

TEST(WindowAnalyzer, ATorchLoopThatStallsIsAHostStallOfTheTorchLayer) {
  const Verdicts r = analyze(torch_loop(4, 40, 5, stall(25, 4)));
  const auto throughput = r.of("throughput");
  ASSERT_EQ(throughput.size(), 1u) << describe(r);
  EXPECT_EQ(throughput[0].layer, Layer::kTorch);
  EXPECT_NE(throughput[0].message.find("time between torch calls grew"), std::string::npos)
      << throughput[0].message;
  EXPECT_FALSE(speaks_of_gpus(throughput[0].suggestion)) << throughput[0].suggestion;
  EXPECT_NE(throughput[0].suggestion.find("python layer"), std::string::npos);
}

TEST(WindowAnalyzer, HealthyTorchLoopsRaiseNothing) {
  for (unsigned seed = 1; seed <= 4; ++seed) {
    const Verdicts r = analyze(torch_loop(4, 60, seed));
    EXPECT_TRUE(r.anomalies.empty()) << "seed " << seed << "\n" << describe(r);
  }
}

TEST(WindowAnalyzer, SmallLatencyChangeIsNotASpike) {
  // 30 % slower launches: inside the 2x rule, so not a latency anomaly.
  const Verdicts r = analyze(loop(3, 40, 9, slower(25, "cudaLaunchKernel", 1.3)));
  EXPECT_TRUE(r.of("latency").empty()) << describe(r);
}

TEST(WindowAnalyzer, AJobThatGetsFasterIsNoAnomaly) {
  // From 15 s on the synchronisations take half as long: unlike the baseline, and the GMM finds
  // those windows unlikely, but nothing got worse. Without the direction rule it is reported.
  const auto calls = loop(7, 30, 9, slower(15, "cudaStreamSynchronize", 0.5));
  EXPECT_TRUE(analyze(calls).anomalies.empty()) << describe(analyze(calls));
  AnalyzerOptions any_direction;
  any_direction.gmm_min_worse_z = -1e9;
  EXPECT_FALSE(analyze(calls, nullptr, any_direction).of("gmm").empty());
}

TEST(WindowAnalyzer, AJobThatSpeedsUpAfterAContendedWarmUpIsNoAnomaly) {
  // A real job whose warm-up fell while the machine's CPUs were taken: from 20 s on its host work
  // between steps takes a tenth as long, so it makes ten times the operator calls and spends
  // far more of its time inside them. The busier share comes with the higher rate: more work
  // done, not calls that got slower.
  const Verdicts r = analyze(torch_loop(4, 40, 3, stall(20, 0.1)));
  EXPECT_TRUE(r.anomalies.empty()) << describe(r);
  // The same share without the rate is slower operators, and still found.
  const Verdicts slower_ops = analyze(torch_loop(4, 40, 3, slower(20, "aten::convolution", 8)));
  EXPECT_FALSE(slower_ops.of("gmm").empty()) << describe(slower_ops);
}

// A real job's first seconds: imports and set-up, a few slow calls a second (cudaGetDevice,
// cudaMalloc of the weights), then the training loop.
std::vector<CallSample> set_up_then_loop(uint32_t pid, double set_up_s, double seconds,
                                         unsigned seed, const Fault& fault = {}) {
  std::vector<CallSample> out;
  const uint64_t t0 = 50 * kS;
  const auto set_up_ns = static_cast<uint64_t>(set_up_s * 1e9);
  for (uint64_t t = t0; t < t0 + set_up_ns; t += 300 * kMs) {
    CallSample c;
    c.pid = pid;
    c.name = "cudaMalloc";
    c.api_class = api_class(c.layer, c.name);
    c.start_ns = t;
    c.duration_ns = 2 * kMs;
    c.bytes = 64 << 20;
    out.push_back(c);
  }
  for (CallSample c : loop(pid, seconds, seed, fault)) {
    c.start_ns += set_up_ns;
    out.push_back(c);
  }
  return out;
}

TEST(WindowAnalyzer, TheWarmUpStartsAgainWhenTheWorkBegins) {
  AnalyzerOptions no_restart;
  no_restart.work_min_call_rate = 1e18;
  // A set-up longer than the warm-up (a baseline learned from it alone) and one within it.
  for (double set_up_s : {15.0, 6.0}) {
    const auto calls = set_up_then_loop(6, set_up_s, 40, 5);
    const Verdicts r = analyze(calls);
    EXPECT_TRUE(r.anomalies.empty()) << "set-up " << set_up_s << " s\n" << describe(r);
    // Learned from the set-up alone, the baseline calls the training an anomaly.
    if (set_up_s > 11) {
      EXPECT_FALSE(analyze(calls, nullptr, no_restart).anomalies.empty());
    }

    WindowAnalyzer a;
    a.set_session_start(50 * kS);
    for (const CallSample& c : calls) a.on_call(c);
    (void)a.finish(calls.back().end_ns() + kS);
    ASSERT_EQ(a.report().size(), 1u);
    EXPECT_EQ(a.report()[0]["warmup_restarts"], 1) << a.report().dump();
    EXPECT_EQ(a.report()[0]["baseline"], "warm-up (10 windows)");
  }
  // A fault in the training that follows is still found, and when.
  const Verdicts r = analyze(set_up_then_loop(6, 15, 40, 5, slower(25, "cudaLaunchKernel", 40)));
  const auto latency = r.of("latency");
  ASSERT_EQ(latency.size(), 1u) << describe(r);
  EXPECT_GE(latency[0].t_s, 15 + 24.0);
  EXPECT_LE(latency[0].t_s, 15 + 25.01);
  // A busy job that gets busier is no new start: its baseline stays.
  WindowAnalyzer busy;
  busy.set_session_start(50 * kS);
  const auto steady = loop(8, 40, 3, stall(20, 0.05));  // 20x the steps from 20 s on
  for (const CallSample& c : steady) busy.on_call(c);
  (void)busy.finish(steady.back().end_ns() + kS);
  EXPECT_EQ(busy.report()[0]["warmup_restarts"], 0) << busy.report().dump();
}

TEST(WindowAnalyzer, ThroughputDropIsAHostStall) {
  const Verdicts r = analyze(loop(4, 40, 11, stall(25, 4)));
  const auto drops = r.of("throughput");
  ASSERT_EQ(drops.size(), 1u) << describe(r);
  const Anomaly& a = drops[0];
  EXPECT_EQ(a.pid, 4u);
  EXPECT_GE(a.t_s, 24.0);
  EXPECT_LE(a.t_s, 25.01);
  EXPECT_NEAR(a.evidence["drop"].get<double>(), 0.75, 0.05);
  EXPECT_NE(a.message.find("time between GPU calls grew"), std::string::npos);
  EXPECT_NE(a.suggestion.find("asynchronous"), std::string::npos);
  EXPECT_TRUE(r.of("latency").empty()) << describe(r);
}

TEST(WindowAnalyzer, StoppedWorkerIsAThroughputDrop) {
  // The worker stops calling at 25 s but lives on (a hang): empty windows, rate 0.
  std::vector<CallSample> calls = loop(5, 25, 13);
  WindowAnalyzer a;
  a.set_session_start(50 * kS);
  std::vector<Anomaly> found;
  for (const CallSample& c : calls) {
    a.on_call(c);
    for (Anomaly& x : a.advance(c.end_ns())) found.push_back(std::move(x));
  }
  for (Anomaly& x : a.advance(calls.back().end_ns() + 5 * kS)) found.push_back(std::move(x));
  ASSERT_FALSE(found.empty());
  EXPECT_EQ(found[0].kind, "throughput");
  EXPECT_DOUBLE_EQ(found[0].evidence["call_rate"].get<double>(), 0);
}

TEST(WindowAnalyzer, ModelFromHealthyRunsNeedsNoWarmup) {
  // Baseline from a healthy run's windows; the fault starts at 5 s, inside what would have been
  // the warm-up.
  WindowAggregator agg;
  for (const CallSample& c : loop(3, 60, 21)) agg.add(c);
  std::vector<Window> ws;
  for (Window& w : agg.finish(200 * kS)) {
    if (w.index >= 1) ws.push_back(std::move(w));
  }
  auto b = EntityBaseline::fit(ws, {});
  ASSERT_TRUE(b) << b.error().message;
  DetectorModel m;
  m.entities.emplace("rank:3", std::move(*b));
  const Verdicts healthy = analyze(loop(3, 40, 22), &m);
  EXPECT_TRUE(healthy.anomalies.empty()) << describe(healthy);
  const Verdicts r = analyze(loop(3, 20, 23, slower(5, "cudaStreamSynchronize", 20)), &m);
  const auto latency = r.of("latency");
  ASSERT_EQ(latency.size(), 1u) << describe(r);
  EXPECT_EQ(latency[0].evidence["api"], "cudaStreamSynchronize");
  EXPECT_LE(latency[0].t_s, 5.01);
  EXPECT_EQ(latency[0].evidence["baseline"], "model entity 'rank:3'");
  // A worker the model does not know (and no "*" entry) is not judged.
  const Verdicts other = analyze(loop(7, 20, 24, slower(5, "cudaStreamSynchronize", 20)), &m);
  EXPECT_TRUE(other.anomalies.empty()) << describe(other);
}

}  // namespace
}  // namespace eacgm

namespace eacgm {
namespace {

TEST(EntityKey, AWorkersBaselineIsNeverItsParents) {
  EXPECT_EQ(entity_key({0, "python3.11", "rank"}), "rank:0");
  EXPECT_EQ(entity_key({0, "python3.11", "worker"}), "worker:rank:0");
  EXPECT_EQ(entity_key({std::nullopt, "python3.11", "main"}), "comm:python3.11");
  EXPECT_EQ(entity_key({std::nullopt, "python3.11", "worker"}), "worker:comm:python3.11");
}

}  // namespace
}  // namespace eacgm

namespace eacgm {
namespace {

// A process too short for a baseline is listed as not judged, never left out.
TEST(WindowAnalyzer, ReportListsProcessesTooShortToJudge) {
  WindowAnalyzer a;
  a.set_session_start(50 * kS);
  std::vector<CallSample> calls = loop(3, 30, 1);         // long enough for a baseline
  const std::vector<CallSample> brief = loop(7, 0.5, 2);  // ends within its first second
  calls.insert(calls.end(), brief.begin(), brief.end());
  std::sort(calls.begin(), calls.end(),
            [](const CallSample& l, const CallSample& r) { return l.end_ns() < r.end_ns(); });
  a.end_process(7, brief.back().end_ns() + kMs);  // it exited then
  for (const CallSample& c : calls) a.on_call(c);
  (void)a.finish(calls.back().end_ns() + kS);
  const nlohmann::json report = a.report();
  std::map<uint32_t, nlohmann::json> by_pid;
  for (const nlohmann::json& w : report) by_pid[w["pid"].get<uint32_t>()] = w;
  ASSERT_EQ(by_pid.size(), 2u) << report.dump();
  EXPECT_GT(by_pid[3]["scored_windows"].get<size_t>(), 0u);
  EXPECT_EQ(by_pid[7]["scored_windows"], 0);
  EXPECT_EQ(by_pid[7]["windows"], 0);
}

}  // namespace
}  // namespace eacgm
