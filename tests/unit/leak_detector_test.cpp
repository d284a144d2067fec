// The device-memory leak detector against synthetic training loops with
// known ground truth: a leaking loop is flagged, a healthy one never is.
#include "analysis/leak_detector.h"

#include <gtest/gtest.h>

namespace eacgm {
namespace {

constexpr uint64_t kMs = 1'000'000;
constexpr int64_t kMiB = 1 << 20;

// A loop of `steps`: allocate a 256 MiB working set in three parts, free
// them, and leak `leak` bytes each step; then free everything but the leak.
void training_loop(LeakDetector& d, uint32_t pid, int steps, int64_t leak, uint64_t step_ns) {
  int64_t out = 0;
  uint64_t t = 1000 * kMs;
  for (int s = 0; s < steps; ++s, t += step_ns) {
    for (int i = 0; i < 3; ++i) d.on_memory(pid, t + i, out += 85 * kMiB);
    if (leak) d.on_memory(pid, t + 3, out += leak);
    for (int i = 0; i < 3; ++i) d.on_memory(pid, t + step_ns / 2 + i, out -= 85 * kMiB);
  }
  d.on_memory(pid, t, out = steps * leak);  // teardown frees the working set
}

TEST(LeakDetector, LeakingLoopIsFlaggedWithEvidence) {
  LeakDetector d;
  training_loop(d, 7, 200, 2 * kMiB, 5 * kMs);
  training_loop(d, 8, 200, 0, 5 * kMs);  // a healthy neighbour
  auto found = d.check(0);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].kind, "leak");
  EXPECT_EQ(found[0].pid, 7u);
  EXPECT_EQ(found[0].layer, Layer::kCuda);
  const double rate = found[0].evidence["growth_bytes_per_s"].get<double>();
  EXPECT_NEAR(rate, 2.0 * kMiB / 0.005, 0.1 * 2.0 * kMiB / 0.005);  // 2 MiB per 5 ms step
  EXPECT_TRUE(d.check(0).empty());  // once per process
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
  for (int i = 0; i < 5; ++i) d.on_memory(1, i * 100 * kMs, (i + 1) * 100 * kMiB);
  EXPECT_TRUE(d.check(0).empty());
}

TEST(LeakDetector, LongRunsKeepBoundedHistoryAndStillDetect) {
  LeakDetector::Options options;
  options.max_points = 64;  // forces many pairwise merges
  LeakDetector d(options);
  training_loop(d, 3, 20000, kMiB, kMs);
  auto found = d.check(0);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].pid, 3u);
}

}  // namespace
}  // namespace eacgm
