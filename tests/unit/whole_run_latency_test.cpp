// The whole-run latency judgement eacgm analyze gives a process shorter than its warm-up: a short
// episode of slow calls of one API is found, named and timed; healthy short runs with realistic
// noise (log-normal durations, rare isolated slow calls) raise nothing; what is too small, too
// early or not asked for is left alone.
#include "analysis/whole_run_latency.h"

#include <gtest/gtest.h>

#include <random>

#include "test_support.h"

namespace eacgm {
namespace {

constexpr uint64_t kStart = 100 * kS;  // the session's start

struct SlowSyncs {
  int from_step = -1;  // steps [from_step, from_step + count) sync `factor` times slower
  int count = 0;
  double factor = 1;
  bool failed = false;  // the slow syncs fail (their durations say nothing of the API's speed)
};

// A 7-second job of pid `pid`: a step every 10 ms after 0.5 s of start-up, each a cudaMalloc,
// 5 launches, a 2 ms stream synchronisation and a cudaFree, log-normal noise and 1 % of calls 5x
// slower.
RecordedSession job(uint32_t pid, unsigned seed, const SlowSyncs& slow = {}) {
  RecordedSession s;
  s.start_ns = kStart;
  s.end_ns = kStart + 8 * kS;
  s.processes[pid] = EntityInfo{0, "train", "main"};
  std::mt19937_64 rng(seed);
  std::lognormal_distribution<double> noise(0, 0.2);
  std::uniform_real_distribution<double> u(0, 1);
  uint64_t t = kStart + kS / 2;
  for (int step = 0; step < 700; ++step) {
    const uint64_t step_start = t;
    const bool slowed = step >= slow.from_step && step < slow.from_step + slow.count;
    // The rare slow calls stay clear of the episode, so that it holds exactly `count` slow calls
    // (one next to it would rightly be part of it).
    const bool near = step >= slow.from_step - 3 && step < slow.from_step + slow.count + 3;
    auto emit = [&](std::string_view name, double typical_ns, bool slow_call = false) {
      CallSample c;
      c.pid = pid;
      c.name = name;
      c.api_class = api_class(c.layer, c.name);
      c.start_ns = t;
      const bool outlier = u(rng) < 0.01 && !near;
      c.duration_ns = static_cast<uint64_t>(typical_ns * noise(rng) * (outlier ? 5 : 1) *
                                            (slow_call ? slow.factor : 1));
      c.failed = slow_call && slow.failed;
      s.calls.push_back(c);
      t += c.duration_ns + 2000;
    };
    emit("cudaMalloc", 6000);
    for (int k = 0; k < 5; ++k) emit("cudaLaunchKernel", 3000);
    emit("cudaStreamSynchronize", 2e6, slowed);
    emit("cudaFree", 4000);
    t = std::max(t, step_start + 10 * kMs);
  }
  return s;
}

TEST(WholeRunLatency, HealthyShortRunsRaiseNothing) {
  for (unsigned seed = 1; seed <= 10; ++seed) {
    const RecordedSession s = job(7, seed);
    EXPECT_TRUE(whole_run_latency_episodes(s, {7}).empty()) << "seed " << seed;
  }
}

TEST(WholeRunLatency, FifteenSlowSyncsAreOneEpisodeNamedAndTimed) {
  for (unsigned seed = 1; seed <= 5; ++seed) {
    const RecordedSession s = job(7, seed, {.from_step = 300, .count = 15, .factor = 15});
    const std::vector<Anomaly> found = whole_run_latency_episodes(s, {7});
    ASSERT_EQ(found.size(), 1u) << "seed " << seed;
    const Anomaly& a = found[0];
    EXPECT_EQ(a.kind, "latency");
    EXPECT_EQ(a.pid, 7u);
    EXPECT_EQ(a.rank, 0);
    EXPECT_EQ(a.evidence["api"], "cudaStreamSynchronize");
    EXPECT_EQ(a.evidence["calls"], 15);
    EXPECT_EQ(a.evidence["baseline"], "whole run");
    EXPECT_NEAR(a.evidence["ratio"].get<double>(), 15, 3);
    // Step 300 begins about 0.5 s + 300 x 10 ms after the session's start.
    EXPECT_NEAR(a.t_s, 3.5, 0.3) << a.message;
    const auto window = a.evidence["window_s"];
    // 15 steps of about 30 ms each.
    EXPECT_NEAR(window[1].get<double>() - window[0].get<double>(), 15 * 0.030, 0.1);
    EXPECT_NE(a.message.find("pid 7 (rank 0): cudaStreamSynchronize takes"), std::string::npos)
        << a.message;
    EXPECT_NE(a.message.find("15 slow calls in a row"), std::string::npos) << a.message;
  }
}

TEST(WholeRunLatency, OnlyTheAskedProcessesAreJudged) {
  const RecordedSession s = job(7, 1, {.from_step = 300, .count = 15, .factor = 15});
  EXPECT_TRUE(whole_run_latency_episodes(s, {8}).empty());
  EXPECT_TRUE(whole_run_latency_episodes(s, {}).empty());
}

TEST(WholeRunLatency, TooFewSlowCallsOrTooLittleTimeIsNothing) {
  // 5 slow calls in a row: under min_slow_calls.
  EXPECT_TRUE(
      whole_run_latency_episodes(job(7, 1, {.from_step = 300, .count = 5, .factor = 15}), {7})
          .empty());
  // 15 calls 6x slower, but the process only spent 150 ms more than usual: the floor asks for
  // 10 % of its 7 s here.
  WholeRunOptions strict;
  strict.min_added_share = 0.1;
  EXPECT_TRUE(whole_run_latency_episodes(job(7, 1, {.from_step = 300, .count = 15, .factor = 6}),
                                         {7}, strict)
                  .empty());
  EXPECT_EQ(whole_run_latency_episodes(job(7, 1, {.from_step = 300, .count = 15, .factor = 6}), {7})
                .size(),
            1u);
}

TEST(WholeRunLatency, TheSetupSecondAndFailedCallsAreNotJudged) {
  // Steps 0-99 fall in the process's first second (its first call is at 0.5 s).
  EXPECT_TRUE(
      whole_run_latency_episodes(job(7, 1, {.from_step = 10, .count = 15, .factor = 15}), {7})
          .empty());
  EXPECT_TRUE(whole_run_latency_episodes(
                  job(7, 1, {.from_step = 300, .count = 15, .factor = 15, .failed = true}), {7})
                  .empty());
}

TEST(WholeRunLatency, TwoEpisodesApartAreTwoAnomalies) {
  RecordedSession s = job(7, 2, {.from_step = 200, .count = 12, .factor = 10});
  // A second stretch later on, where the job had no rare slow call: the syncs slowed in place.
  RecordedSession clean = job(7, 2, {.from_step = 500, .count = 12, .factor = 1});
  size_t step = 0;
  for (size_t i = 0; i < s.calls.size(); ++i) {
    CallSample& c = s.calls[i];
    if (c.name != "cudaStreamSynchronize") continue;
    if (step >= 497 && step < 515) c.duration_ns = clean.calls[i].duration_ns;
    if (step >= 500 && step < 512) c.duration_ns *= 10;
    ++step;
  }
  const std::vector<Anomaly> found = whole_run_latency_episodes(s, {7});
  ASSERT_EQ(found.size(), 2u);
  EXPECT_LT(found[0].t_s, found[1].t_s);
  EXPECT_EQ(found[0].evidence["calls"], 12);
  EXPECT_EQ(found[1].evidence["calls"], 12);
}

}  // namespace
}  // namespace eacgm
