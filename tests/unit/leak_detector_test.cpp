// The device-memory leak detector against synthetic training loops with
// known ground truth: a leaking loop is flagged, a healthy one never is.
#include "analysis/leak_detector.h"

#include <gtest/gtest.h>

#include <random>

#include "test_support.h"

namespace eacgm {
namespace {

constexpr int64_t kSignedMiB = 1 << 20;  // for byte deltas, which go down too

// A loop of `steps`: allocate a 256 MiB working set in three parts, free
// them, and leak `leak` bytes each step; then free everything but the leak.
void training_loop(LeakDetector& d, uint32_t pid, int steps, int64_t leak, uint64_t step_ns) {
  int64_t out = 0;
  uint64_t t = 1000 * kMs;
  for (int s = 0; s < steps; ++s, t += step_ns) {
    for (int i = 0; i < 3; ++i) d.on_memory(pid, t + i, out += 85 * kSignedMiB);
    if (leak) d.on_memory(pid, t + 3, out += leak);
    for (int i = 0; i < 3; ++i) d.on_memory(pid, t + step_ns / 2 + i, out -= 85 * kSignedMiB);
  }
  d.on_memory(pid, t, out = steps * leak);  // teardown frees the working set
}

TEST(LeakDetector, LeakingLoopIsFlaggedWithEvidence) {
  LeakDetector d;
  training_loop(d, 7, 200, 2 * kSignedMiB, 5 * kMs);
  training_loop(d, 8, 200, 0, 5 * kMs);  // a healthy neighbour
  auto found = d.check(0);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].kind, "leak");
  EXPECT_EQ(found[0].pid, 7u);
  EXPECT_EQ(found[0].layer, Layer::kCuda);
  const double rate = found[0].evidence["growth_bytes_per_s"].get<double>();
  EXPECT_NEAR(rate, 2.0 * kSignedMiB / 0.005,
              0.1 * 2.0 * kSignedMiB / 0.005);  // 2 MiB per 5 ms step
  EXPECT_TRUE(d.check(0).empty());              // once per process
}

TEST(LeakDetector, HealthyLoopIsNeverFlagged) {
  LeakDetector d;
  training_loop(d, 1, 5000, 0, 2 * kMs);
  EXPECT_TRUE(d.check(0).empty());
}

TEST(LeakDetector, GrowthTooSmallAgainstTheWorkingSetIsNotALeak) {
  LeakDetector d;
  training_loop(d, 1, 100, 4096, 5 * kMs);  // 400 KiB over a 256 MiB working set
  EXPECT_TRUE(d.check(0).empty());
}

TEST(LeakDetector, TooFewEventsToJudge) {
  LeakDetector d;
  for (int i = 0; i < 5; ++i) d.on_memory(1, i * 100 * kMs, (i + 1) * 100 * kSignedMiB);
  EXPECT_TRUE(d.check(0).empty());
}

TEST(LeakDetector, LongRunsKeepBoundedHistoryAndStillDetect) {
  LeakDetector::Options options;
  options.max_points = 64;  // forces many pairwise merges
  LeakDetector d(options);
  training_loop(d, 3, 20000, kSignedMiB, kMs);
  auto found = d.check(0);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].pid, 3u);
}

// One step of a loop that keeps a model of `model` bytes and allocates a
// working set of a random size (up to 64 MiB) that it frees again, leaking
// `leak` bytes: what a training step does to the floor. Returns the time after it.
uint64_t step(LeakDetector& d, uint32_t pid, uint64_t t, uint64_t step_ns, int64_t& out,
              int64_t leak, std::mt19937& rng) {
  const int64_t work = static_cast<int64_t>(rng() % (64 * kSignedMiB));
  d.on_memory(pid, t, out += work);
  if (leak) d.on_memory(pid, t + 1, out += leak);
  d.on_memory(pid, t + step_ns / 2, out -= work);
  return t + step_ns;
}

TEST(LeakDetector, ALeakThatBeginsAfterAnHourIsNamedWithinSeconds) {
  // An hour of healthy 5 ms steps with a 2 GiB model, checked every second as
  // record does; then 1 MiB leaks per step. Judged on the whole history the
  // leak would have to grow for over two more hours; the recent windows name
  // it within five seconds, with its onset.
  LeakDetector d;
  std::mt19937 rng(3);
  int64_t out = 0;
  d.on_memory(1, 0, out = 2048 * kSignedMiB);
  uint64_t t = 1000 * kMs, checked = t;
  constexpr uint64_t kStep = 5 * kMs, kHour = 3600'000 * kMs;
  while (t < kHour) {
    t = step(d, 1, t, kStep, out, 0, rng);
    if (t >= checked + 1000 * kMs) {
      checked = t;
      auto found = d.check(0);
      ASSERT_TRUE(found.empty()) << found[0].message;
    }
  }
  const uint64_t onset = t;
  std::vector<Anomaly> found;
  while (found.empty() && t < onset + 60'000 * kMs) {
    t = step(d, 1, t, kStep, out, kSignedMiB, rng);
    if (t >= checked + 1000 * kMs) {
      checked = t;
      found = d.check(0);
    }
  }
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].pid, 1u);
  EXPECT_LE(t - onset, 5000 * kMs);
  EXPECT_NEAR(found[0].t_s, onset / 1e9, 1.0);  // since when, within a segment or two
  const double rate = found[0].evidence["growth_bytes_per_s"].get<double>();
  EXPECT_NEAR(rate, kSignedMiB / 0.005, 0.25 * kSignedMiB / 0.005);
}

TEST(LeakDetector, AFloorThatStepsUpOnceIsNoLeak) {
  // The optimizer's state is allocated after the first steps and kept: the
  // floor rises once and stays. Checked every second over ten minutes.
  LeakDetector d;
  std::mt19937 rng(4);
  int64_t out = 512 * kSignedMiB;
  uint64_t t = 1000 * kMs, checked = t;
  for (int s = 0; s < 120'000; ++s) {
    if (s == 2'000) d.on_memory(1, t, out += 1024 * kSignedMiB);
    t = step(d, 1, t, 5 * kMs, out, 0, rng);
    if (t >= checked + 1000 * kMs) {
      checked = t;
      auto found = d.check(0);
      ASSERT_TRUE(found.empty()) << "step " << s << ": " << found[0].message;
    }
  }
}

}  // namespace
}  // namespace eacgm
