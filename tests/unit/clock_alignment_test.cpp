// Sessions of several nodes put on one clock: the realtime guess refined by the collectives,
// which overlap on every pair of ranks.
#include "merge/clock_alignment.h"

#include <gtest/gtest.h>

#include <cstdlib>

namespace eacgm {
namespace {

// A 4-rank job, `ranks` of it recorded by this session whose clock reads true time + `skew_ns`:
// collective k starts at k ms; rank r arrives r*50 µs (+ rank 3 late by `late_ns`) after it, and
// every rank leaves together 200 µs after the last arrival.
SessionClock node(std::vector<int> ranks, int64_t skew_ns, int64_t realtime_offset_ns,
                  int64_t late_ns = 0, int collectives = 50, int64_t drift_per_collective = 0) {
  SessionClock s{.realtime_offset_ns = realtime_offset_ns, .collectives = {}};
  for (int k = 1; k <= collectives; ++k) {
    const int64_t begin = 1'000'000'000 + k * 1'000'000;
    const int64_t last = begin + 3 * 50'000 + late_ns;
    for (int r : ranks) {
      const int64_t arrive = begin + r * 50'000 + (r == 3 ? late_ns : 0);
      const int64_t skew = skew_ns + k * drift_per_collective;
      s.collectives.push_back({.comm = "c",
                               .seq = static_cast<uint64_t>(k),
                               .rank = r,
                               .start_ns = static_cast<uint64_t>(arrive + skew),
                               .end_ns = static_cast<uint64_t>(last + 200'000 + skew)});
    }
  }
  return s;
}

TEST(ClockAlignment, CollectivesCorrectAWrongRealtimeGuess) {
  // Node B's monotonic clock is 7 s ahead; its realtime offset says so, but 40 ms wrong (NTP).
  const int64_t skew = 7'000'000'000;
  const auto shifts =
      align_clocks({node({0, 1}, 0, 1000), node({2, 3}, skew, 1000 - skew + 40'000'000)});
  ASSERT_EQ(shifts.size(), 2u);
  EXPECT_EQ(shifts[0].method, "reference");
  EXPECT_EQ(shifts[1].method, "collectives");
  EXPECT_EQ(shifts[1].collectives_shared, 50u);
  EXPECT_EQ(shifts[1].conflicts, 0u);
  ASSERT_TRUE(shifts[1].residual_ns);
  // The truth is -skew: within the error stated, and that error well under a collective's length.
  EXPECT_LE(std::llabs(shifts[1].shift_ns + skew), *shifts[1].residual_ns);
  EXPECT_LT(*shifts[1].residual_ns, 400'000);
  EXPECT_NEAR(static_cast<double>(shifts[1].realtime_correction_ns), -40e6, 400'000);
}

TEST(ClockAlignment, ARealtimeGuessTheCollectivesAllowStands) {
  const auto shifts = align_clocks({node({0, 1}, 0, 5000), node({2, 3}, 0, 5000 + 20'000)});
  EXPECT_EQ(shifts[1].shift_ns, 20'000);  // 20 µs of NTP error: within the bounds
  EXPECT_EQ(shifts[1].realtime_correction_ns, 0);
  EXPECT_EQ(shifts[1].method, "collectives");
}

TEST(ClockAlignment, WithoutSharedCollectivesOnlyTheRealtimeClocksSpeak) {
  SessionClock other = node({2, 3}, 0, 777);
  for (CollectiveSpan& c : other.collectives) c.comm = "another job";
  const auto shifts = align_clocks({node({0, 1}, 0, 1000), other});
  EXPECT_EQ(shifts[1].method, "realtime");
  EXPECT_EQ(shifts[1].shift_ns, -223);
  EXPECT_FALSE(shifts[1].residual_ns);
}

TEST(ClockAlignment, SessionsAreChainedThroughTheOnesAlignedBefore) {
  // Three nodes; the third shares its collectives with the second only (a communicator of its
  // own with it), and the reference is the last on the command line.
  SessionClock a = node({0}, 0, 0);
  SessionClock b = node({1}, 3'000'000, 0);
  SessionClock c = node({2}, -9'000'000, 0);
  for (const CollectiveSpan& x : node({1}, 3'000'000, 0).collectives) {
    CollectiveSpan y = x;
    y.comm = "bc";
    b.collectives.push_back(y);
  }
  for (CollectiveSpan& x : c.collectives) x.comm = "bc";
  const auto shifts = align_clocks({c, b, a}, 2);
  EXPECT_EQ(shifts[2].method, "reference");
  EXPECT_LE(std::llabs(shifts[1].shift_ns + 3'000'000), *shifts[1].residual_ns);
  EXPECT_LE(std::llabs(shifts[0].shift_ns - 9'000'000), *shifts[0].residual_ns);
}

TEST(ClockAlignment, DriftShowsAsConflicts) {
  // Node B's clock runs fast, 100 µs more each millisecond: no single shift overlaps them all.
  const auto shifts = align_clocks({node({0, 1}, 0, 0), node({2, 3}, 0, 0, 0, 50, 100'000)});
  EXPECT_GT(shifts[1].conflicts, 0u);
  EXPECT_FALSE(shifts[1].residual_ns);
}

}  // namespace
}  // namespace eacgm
