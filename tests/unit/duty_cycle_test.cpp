// --overhead-budget's controller driven by hand: a job within its budget is traced all the time;
// one above it gets off-phases that bring the cycle's cost to the budget and pay for the first
// on-phase and ahead for the next, set by its costliest process, counting the calls that are
// always traced, and measured again at every on-phase; the account (traced share, off-phases,
// slowdowns) is exact.
#include "agent/duty_cycle.h"

#include <gtest/gtest.h>

namespace eacgm {
namespace {

constexpr uint64_t kS = 1'000'000'000;

// `n` calls of `cost_ns` each in `pid`.
void calls(DutyCycle& d, uint32_t pid, int n, double cost_ns, bool cycled = true) {
  for (int i = 0; i < n; ++i) d.on_call(pid, cost_ns, cycled);
}

TEST(DutyCycle, AJobWithinItsBudgetIsTracedAllTheTime) {
  DutyCycle d({.budget = 0.01, .min_on_ns = 2 * kS}, 10 * kS);
  EXPECT_TRUE(d.tick(10 * kS));
  for (uint64_t t = 11; t <= 30; ++t) {
    calls(d, 7, 1000, 4000);         // 4 ms of every second: 0.4 %
    calls(d, 7, 100, 10000, false);  // and 1 ms always traced: 0.5 % in all
    EXPECT_TRUE(d.tick(t * kS)) << t;
  }
  const DutyCycleFigures f = d.figures(30 * kS);
  EXPECT_DOUBLE_EQ(f.traced_fraction, 1);
  EXPECT_EQ(f.on_phases, 1u);
  EXPECT_TRUE(f.untraced.empty());
  EXPECT_NEAR(f.slowdown_while_traced, 0.005, 1e-12);
  EXPECT_NEAR(f.always_traced_slowdown, 0.001, 1e-12);
  EXPECT_NEAR(f.estimated_slowdown, 0.005, 1e-9);
}

TEST(DutyCycle, AJobOverItsBudgetIsTracedTheShareThatKeepsIt) {
  DutyCycle d({.budget = 0.01, .min_on_ns = 2 * kS}, 0);
  calls(d, 7, 80, 1'000'000);  // 80 ms in the first 2 s: 4 % while traced
  calls(d, 8, 20, 1'000'000);  // another process at 1 %: the costliest one sets the cycle
  EXPECT_TRUE(d.tick(1 * kS));
  // 4 % over a 1 % budget: a cycle of 2 s on and 6 s off would keep it. The first on-phase
  // spent 60 ms beyond the budget, and the next will too: 120 ms, paid back at 1 % in 12 s.
  EXPECT_FALSE(d.tick(2 * kS));
  EXPECT_FALSE(d.tick(13 * kS));
  EXPECT_TRUE(d.tick(14 * kS));
  DutyCycleFigures f = d.figures(14 * kS);
  EXPECT_DOUBLE_EQ(f.traced_fraction, 2.0 / 14);
  EXPECT_EQ(f.on_phases, 2u);
  EXPECT_NEAR(f.slowdown_while_traced, 0.04, 1e-12);
  EXPECT_NEAR(f.estimated_slowdown, 80.0 / 14000, 1e-12);
  ASSERT_EQ(f.untraced.size(), 1u);
  EXPECT_EQ(f.untraced[0], (std::pair<uint64_t, uint64_t>{2 * kS, 14 * kS}));
  // The next on-phase at the same cost ends within the budget: the cycle's 6 s off from then on.
  calls(d, 7, 80, 1'000'000);
  EXPECT_FALSE(d.tick(16 * kS));
  EXPECT_NEAR(d.figures(16 * kS).estimated_slowdown, 0.01, 1e-12);  // 160 ms over 16 s
  EXPECT_FALSE(d.tick(21 * kS));
  EXPECT_TRUE(d.tick(22 * kS));

  // The job slowed its calls down: the next on-phase measures 0.4 % and tracing stays on.
  calls(d, 7, 10, 1'000'000);
  EXPECT_TRUE(d.tick(24 * kS + kS / 2));  // a late tick: the phase ends then, not at 24 s
  EXPECT_TRUE(d.tick(30 * kS));
  f = d.figures(30 * kS);
  EXPECT_NEAR(f.slowdown_while_traced, 0.0, 1e-12);  // nothing in the last phase
  EXPECT_DOUBLE_EQ(f.traced_fraction, (2.0 + 2 + 8) / 30);
  EXPECT_EQ(f.untraced.size(), 2u);
}

TEST(DutyCycle, TheAlwaysTracedCallsTakeTheirShareOfTheBudgetFirst) {
  DutyCycle d({.budget = 0.02, .min_on_ns = 2 * kS}, 0);
  calls(d, 7, 20, 1'000'000, false);  // 20 ms in 2 s always traced: 1 %
  calls(d, 7, 80, 1'000'000);         // 80 ms cycled: 4 % while traced
  EXPECT_FALSE(d.tick(2 * kS));
  // 1 % + f x 4 % = 2 %: f = 1/4, a cycle of 2 s on and 6 s off; but the first on-phase spent
  // 60 ms beyond the budget and the next will too, which the 1 % left in the off-phase pays in
  // 12 s.
  EXPECT_FALSE(d.tick(13 * kS));
  calls(d, 7, 120, 1'000'000, false);  // the always-traced calls go on while the others are off
  EXPECT_TRUE(d.tick(14 * kS));
  const DutyCycleFigures f = d.figures(14 * kS);
  EXPECT_NEAR(f.slowdown_while_traced, 0.05, 1e-12);
  EXPECT_NEAR(f.always_traced_slowdown, 0.01, 1e-12);
  EXPECT_NEAR(f.estimated_slowdown, 220.0 / 14000, 1e-12);  // (20 + 80 + 120) ms over 14 s
}

TEST(DutyCycle, ABudgetTheAlwaysTracedCallsExceedTracesTheRestTheLeast) {
  DutyCycle d({.budget = 0.01, .min_on_ns = 2 * kS}, 0);
  calls(d, 7, 40, 1'000'000, false);  // 2 %: over the budget on their own
  calls(d, 7, 20, 1'000'000);
  EXPECT_FALSE(d.tick(2 * kS));
  EXPECT_NEAR(d.always_traced_slowdown(), 0.02, 1e-12);
  // Traced kMinFraction of the time: 2 s on, 198 s off.
  EXPECT_FALSE(d.tick(199 * kS));
  EXPECT_TRUE(d.tick(200 * kS));
}

TEST(DutyCycle, AnOffPhaseUnderWayEndsNowInTheAccount) {
  DutyCycle d({.budget = 0.001, .min_on_ns = 2 * kS}, 0);
  calls(d, 7, 1, 20'000'000);  // 1 % while traced, ten times the budget
  EXPECT_FALSE(d.tick(2 * kS));
  const DutyCycleFigures f = d.figures(5 * kS);
  ASSERT_EQ(f.untraced.size(), 1u);
  EXPECT_EQ(f.untraced[0], (std::pair<uint64_t, uint64_t>{2 * kS, 5 * kS}));
  EXPECT_DOUBLE_EQ(f.traced_fraction, 0.4);
  // 18 ms beyond the budget, and 18 ms ahead: off until 2 + 36 s.
  EXPECT_FALSE(d.tick(37 * kS));
  EXPECT_TRUE(d.tick(38 * kS));
}

TEST(DutyCycle, SampledCountsScaleByTheTracedShareAndTheSlowerTracedRate) {
  DutyCycle d({.budget = 0.05, .min_on_ns = 2 * kS}, 0);
  calls(d, 7, 400, 1'000'000);        // 400 ms of traps in 2 s: 20 % of its time while traced
  calls(d, 8, 100, 1'000'000);        // 5 %
  calls(d, 9, 10, 1'000'000, false);  // only always-traced calls: not in the scale
  EXPECT_TRUE(d.tick(1 * kS));
  EXPECT_EQ(d.figures(1 * kS).count_scale, 1.0);  // traced all the time so far
  // 20 % over a 5 % budget: off for the 300 ms spent beyond it and 300 ms ahead, 12 s.
  EXPECT_FALSE(d.tick(2 * kS));
  const DutyCycleFigures f = d.figures(14 * kS);
  ASSERT_DOUBLE_EQ(f.traced_fraction, 2.0 / 14);
  // Each call seen in pid 7 stands for 1 + 12 / 2 / (1 - 0.2) calls: untraced, it made its calls
  // faster than the 200 a second it was seen to. Pid 8's for 1 + 12 / 2 / (1 - 0.05).
  const double k7 = 1 + 6 / 0.8, k8 = 1 + 6 / 0.95;
  EXPECT_NEAR(f.count_scale, (400 * k7 + 100 * k8) / 500, 1e-9);
  EXPECT_GT(f.count_scale, 1 / f.traced_fraction);
}

TEST(DutyCycle, AlwaysTracedCallRatesSayHowMuchFasterAProcessRunsUntraced) {
  DutyCycle d({.budget = 0.05, .min_on_ns = 2 * kS}, 0);
  calls(d, 7, 400, 1'000'000);     // 20 % of its traced time, as above
  calls(d, 7, 40, 1'000, false);   // and 20 collectives a second while traced
  EXPECT_FALSE(d.tick(2 * kS));    // off for a little over 12 s
  calls(d, 7, 390, 1'000, false);  // 30 a second untraced: 1.5 times as fast, not 1 / 0.8
  EXPECT_TRUE(d.tick(15 * kS));
  EXPECT_NEAR(d.figures(15 * kS).count_scale, 1 + 13.0 / 2 * 1.5, 1e-9);
}

}  // namespace
}  // namespace eacgm
