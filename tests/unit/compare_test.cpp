// eacgm compare without a recorder: the Mann-Whitney test and the Poisson rate test against values
// computed by hand (and by brute-force enumeration of the permutations, for the exact p-values),
// the decision rule at its edges, the comparison of synthetic runs (healthy against healthy, an API
// 1.5x slower, a new API), the reading of a session database written here (torch self time,
// kernels, inner driver calls left out) and the JSON shape. tests/bpf/test_compare.py runs the
// command on real recordings.
#include "compare/compare.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include "compare/rank_test.h"
#include "compare/report.h"
#include "compare/run_data.h"
#include "test_support.h"

namespace eacgm::compare {
namespace {

TEST(MannWhitney, SeparatedSmallSamplesAreTestedExactly) {
  const std::vector<double> base{1, 2, 3}, candidate{4, 5, 6};
  const RankTest t = mann_whitney(base, candidate);
  EXPECT_DOUBLE_EQ(t.u, 9);  // every candidate value above every base value
  EXPECT_DOUBLE_EQ(t.delta, 1);
  EXPECT_TRUE(t.exact);
  // 2 of the C(6,3) = 20 splits are as extreme (both ends): p = 0.1, never significant at 3 + 3.
  EXPECT_NEAR(t.p, 0.1, 1e-12);
  // mean 4.5, variance 9 * 7 / 12 = 5.25, continuity-corrected distance 4.
  EXPECT_NEAR(t.z, 4 / std::sqrt(5.25), 1e-12);
}

TEST(MannWhitney, TiesGetMidranksAndTheTieCorrection) {
  // Pooled: 1 | 2 2 2 | 3 3 | 4 | 5 -> ranks 1 | 3 3 3 | 5.5 5.5 | 7 | 8.
  const std::vector<double> base{1, 2, 2, 3}, candidate{2, 3, 4, 5};
  const RankTest t = mann_whitney(base, candidate);
  EXPECT_DOUBLE_EQ(t.u, 13.5);  // 3 + 5.5 + 7 + 8 - 4 * 5 / 2
  EXPECT_DOUBLE_EQ(t.delta, 0.6875);
  // variance 16/12 * (9 - (24 + 6) / 56), distance 5.5 - 0.5.
  const double variance = 16.0 / 12.0 * (9 - 30.0 / 56.0);
  EXPECT_NEAR(t.z, 5 / std::sqrt(variance), 1e-12);
  // Enumerating the 70 splits of the tied ranks: 14 are at least as far from the mean.
  EXPECT_TRUE(t.exact);
  EXPECT_NEAR(t.p, 0.2, 1e-12);
}

TEST(MannWhitney, LargerSamplesUseTheNormalApproximation) {
  const std::vector<double> base{1, 2, 2, 3, 3, 3, 4, 5, 6, 7, 7, 8, 9, 10, 11, 12, 12, 13};
  const std::vector<double> candidate{3,  5,  7,  7,  8,  9,  10, 12, 13,
                                      14, 14, 15, 16, 17, 18, 19, 20, 20};
  const RankTest t = mann_whitney(base, candidate);
  EXPECT_FALSE(t.exact);  // 18 a side
  EXPECT_DOUBLE_EQ(t.u, 265);
  EXPECT_NEAR(t.delta, 0.6358024691358024, 1e-12);
  EXPECT_NEAR(t.z, 3.249655085933974, 1e-9);
  EXPECT_NEAR(t.p, 0.0011554505639864217, 1e-9);
  // The test is antisymmetric in its samples.
  const RankTest r = mann_whitney(candidate, base);
  EXPECT_NEAR(r.z, -t.z, 1e-12);
  EXPECT_NEAR(r.p, t.p, 1e-12);
  EXPECT_NEAR(r.delta, -t.delta, 1e-12);
}

TEST(MannWhitney, DegenerateSamples) {
  const std::vector<double> empty, some{1, 2, 3}, same(5, 7.0);
  EXPECT_EQ(mann_whitney(empty, some).p, 1);
  EXPECT_EQ(mann_whitney(some, empty).delta, 0);
  const RankTest tied = mann_whitney(same, same);  // all tied: no evidence at all
  EXPECT_EQ(tied.p, 1);
  EXPECT_EQ(tied.delta, 0);
  // Five a side, fully separated: the smallest exact p, 2 / C(10,5) = 2/252, below 0.01.
  const std::vector<double> low{1, 2, 3, 4, 5}, high{6, 7, 8, 9, 10};
  EXPECT_NEAR(mann_whitney(low, high).p, 2.0 / 252, 1e-12);
}

TEST(PoissonRate, ExactBinomialConditionalTest) {
  // 10 events in 10 s against 30 in 10 s: 2 P(X >= 30), X ~ Bin(40, 1/2).
  EXPECT_NEAR(poisson_rate_p(10, 10, 30, 10), 0.0022214337732293643, 1e-12);
  // Unequal durations: 5 in 10 s against 20 in 20 s, X ~ Bin(25, 2/3).
  EXPECT_NEAR(poisson_rate_p(5, 10, 20, 20), 0.2037454589133285, 1e-12);
  EXPECT_NEAR(poisson_rate_p(7, 10, 7, 10), 1, 1e-9);
  EXPECT_EQ(poisson_rate_p(0, 10, 0, 10), 1);
  // 0 against 8 in equal time: 2 / 2^8.
  EXPECT_NEAR(poisson_rate_p(0, 10, 8, 10), 2.0 / 256, 1e-12);
}

TEST(Median, OddEvenEmpty) {
  EXPECT_EQ(median({}), 0);
  EXPECT_EQ(median({3, 1, 2}), 2);
  EXPECT_EQ(median({4, 1, 3, 2}), 2.5);
}

// A latency change worth a look: it costs 1 % of the job's time.
Evidence latency_evidence(double p, double delta, double ratio) {
  Evidence e{p, delta, ratio, 1000, 1000, metric_info(kLatency), true};
  e.cost = 0.01;
  return e;
}

TEST(Decide, NeedsSignificanceAndALargeEffectBothWays) {
  const Thresholds t;
  EXPECT_EQ(decide(latency_evidence(1e-6, 1.0, 1.5), t), Verdict::kRegression);
  EXPECT_EQ(decide(latency_evidence(1e-6, -1.0, 1 / 1.5), t), Verdict::kImprovement);
  // Significant but small: a 5 % shift over thousands of windows is not a regression.
  EXPECT_EQ(decide(latency_evidence(1e-9, 0.9, 1.05), t), Verdict::kUnchanged);
  // Large but not significant (too few windows).
  EXPECT_EQ(decide(latency_evidence(0.05, 1.0, 2.0), t), Verdict::kUnchanged);
  // A big median ratio over overlapping values (small delta).
  EXPECT_EQ(decide(latency_evidence(1e-3, 0.3, 1.5), t), Verdict::kUnchanged);
  // The median and the bulk disagreeing on the direction.
  EXPECT_EQ(decide(latency_evidence(1e-3, -0.8, 1.5), t), Verdict::kUnchanged);
  // Exactly at the thresholds counts.
  EXPECT_EQ(decide(latency_evidence(0.0099, t.min_delta, t.min_ratio), t), Verdict::kRegression);
  // One run disagreeing.
  Evidence e = latency_evidence(1e-6, 1.0, 1.5);
  e.runs_agree = false;
  EXPECT_EQ(decide(e, t), Verdict::kUnchanged);
}

TEST(Decide, ALatencyChangeMustCostTheJobSomething) {
  const Thresholds t;
  // 1.5x slower, significant, every run agreeing, but 0.03 % of the job's time: what a busier
  // machine does to a rarely called API between two runs, and no rollout's concern.
  Evidence e = latency_evidence(1e-6, 1.0, 1.5);
  e.cost = 0.0003;
  EXPECT_EQ(decide(e, t), Verdict::kUnchanged);
  e.cost = -0.0003;
  e.ratio = 1 / 1.5;
  e.delta = -1;
  EXPECT_EQ(decide(e, t), Verdict::kUnchanged);
  // At the floor, either way, it counts.
  e.cost = -t.min_call_time_cost;
  EXPECT_EQ(decide(e, t), Verdict::kImprovement);
  e = latency_evidence(1e-6, 1.0, 1.5);
  e.cost = t.min_call_time_cost;
  EXPECT_EQ(decide(e, t), Verdict::kRegression);
  // The floor is for time: a share of calls (not moved by a busier machine) has none.
  Evidence share{1e-6, 1.0, 1.5, 1000, 1000, metric_info(kShare), true};
  EXPECT_EQ(decide(share, t), Verdict::kRegression);
  // Nor is it lateness's, which has its own.
  Evidence late{1e-6, 1.0, 1.5, 1000, 1000, metric_info(kLateness), true};
  late.cost = 0.005;
  EXPECT_EQ(decide(late, t), Verdict::kUnchanged);
  late.cost = t.min_cost;
  EXPECT_EQ(decide(late, t), Verdict::kRegression);
}

TEST(Decide, RareApisAndDirections) {
  const Thresholds t;
  Evidence e = latency_evidence(1e-6, 1.0, 2.0);
  e.base_count = 99;  // latency needs calls on both sides
  EXPECT_EQ(decide(e, t), Verdict::kTooFew);
  e.info = metric_info(kShare);  // a share of calls needs them on either
  EXPECT_EQ(decide(e, t), Verdict::kRegression);
  // Lower is worse for GPU utilization and clocks.
  Evidence util{1e-6, -1.0, 0.5, 1000, 1000, metric_info(kGpuUtil), true};
  EXPECT_EQ(decide(util, t), Verdict::kRegression);
  // Events: a new kind of event (ratio infinite), enough of them.
  Evidence events{
      1e-4, 1.0, std::numeric_limits<double>::infinity(), 0, 12, metric_info(kEventRate), true};
  EXPECT_EQ(decide(events, t), Verdict::kRegression);
  events.candidate_count = 9;
  EXPECT_EQ(decide(events, t), Verdict::kTooFew);
}

// A synthetic run: `windows` windows of one rank's cudaLaunchKernel with latencies around
// `latency_ns` (a deterministic wobble of a few percent) and 200 calls each.
RunData synthetic_run(const std::string& dir, double latency_ns, int seed, size_t windows = 20) {
  RunData r;
  r.dir = dir;
  r.seconds = static_cast<double>(windows) * 0.1;
  r.windows = windows;
  RunValues latency, rate, sync;
  for (size_t w = 0; w < windows; ++w) {
    const double wobble = 1 + 0.03 * std::sin(static_cast<double>(w * 7 + seed * 13));
    latency.windows.push_back(latency_ns * wobble);
    rate.windows.push_back(40 * (1 + 0.02 * std::cos(static_cast<double>(w * 5 + seed))));
    sync.windows.push_back(50'000 * wobble);
  }
  latency.count = rate.count = 200 * windows;
  latency.total_ns = rate.total_ns = static_cast<uint64_t>(latency_ns * 200 * windows);
  sync.count = 3;  // too rare to judge, even if its latency moved
  r.metrics[{"rank:0", "cuda", "cudaLaunchKernel", std::string(kLatency)}] = latency;
  r.metrics[{"rank:0", "cuda", "cudaLaunchKernel", std::string(kShare)}] = rate;
  r.metrics[{"rank:0", "cuda", "cudaDeviceSynchronize", std::string(kLatency)}] = sync;
  RunValues sync_rate;
  sync_rate.windows.assign(windows, 0.0);
  sync_rate.count = 3;
  r.metrics[{"rank:0", "cuda", "cudaDeviceSynchronize", std::string(kShare)}] = sync_rate;
  return r;
}

TEST(CompareRuns, HealthyAgainstHealthyIsUnchanged) {
  const Comparison c =
      compare_runs({synthetic_run("a", 3000, 1), synthetic_run("b", 3000, 2)},
                   {synthetic_run("c", 3000, 3), synthetic_run("d", 3000, 4)}, 0.1);
  EXPECT_TRUE(c.regressions.empty());
  EXPECT_TRUE(c.improvements.empty());
  EXPECT_EQ(c.unchanged, 2u);  // cudaLaunchKernel latency and rate
  EXPECT_EQ(c.too_few, 2u);    // cudaDeviceSynchronize
}

TEST(CompareRuns, SlowerApiIsARegressionWithItsRatioAndCost) {
  const Comparison c =
      compare_runs({synthetic_run("a", 3000, 1), synthetic_run("b", 3000, 2)},
                   {synthetic_run("c", 4500, 3), synthetic_run("d", 4500, 4)}, 0.1);
  ASSERT_EQ(c.regressions.size(), 1u);
  const Change& r = c.regressions[0];
  EXPECT_EQ(r.key.what, "cudaLaunchKernel");
  EXPECT_EQ(r.key.metric, kLatency);
  EXPECT_NEAR(r.ratio, 1.5, 0.05);
  EXPECT_LT(r.p, 1e-6);
  EXPECT_DOUBLE_EQ(r.delta, 1);
  EXPECT_EQ(r.base_samples, 40u);
  // 2000 calls a second, each about 1.5 us slower: about 0.3 % of the time.
  ASSERT_TRUE(r.time_share.has_value());
  EXPECT_NEAR(*r.time_share, 0.003, 0.0005);
  EXPECT_TRUE(c.improvements.empty());

  const Comparison back =
      compare_runs({synthetic_run("c", 4500, 3)}, {synthetic_run("a", 3000, 1)}, 0.1);
  EXPECT_TRUE(back.regressions.empty());
  ASSERT_EQ(back.improvements.size(), 1u);
  EXPECT_NEAR(back.improvements[0].ratio, 1 / 1.5, 0.03);
  EXPECT_LT(*back.improvements[0].time_share, 0);
}

TEST(CompareRuns, RunsThatDisagreeMakeNoChange) {
  // Two of three candidate runs slow (a noisy neighbour, say), one as fast as the base: the pooled
  // windows differ clearly, but not every run says so, so nothing is reported.
  const Comparison c = compare_runs(
      {synthetic_run("a", 3000, 1), synthetic_run("b", 3000, 2)},
      {synthetic_run("c", 4500, 3), synthetic_run("d", 4500, 4), synthetic_run("e", 3000, 5)}, 0.1);
  EXPECT_TRUE(c.regressions.empty());
  EXPECT_EQ(c.unchanged, 2u);
  // The same runs all slow: a regression.
  const Comparison all_slow = compare_runs(
      {synthetic_run("a", 3000, 1), synthetic_run("b", 3000, 2)},
      {synthetic_run("c", 4500, 3), synthetic_run("d", 4500, 4), synthetic_run("e", 4500, 5)}, 0.1);
  EXPECT_EQ(all_slow.regressions.size(), 1u);
}

TEST(CompareRuns, ApisOnOneSideAreListedNotJudged) {
  RunData with_new = synthetic_run("c", 3000, 3);
  RunValues memset_rate;
  memset_rate.windows.assign(20, 10.0);
  memset_rate.count = 1000;
  with_new.metrics[{"rank:0", "cuda", "cudaMemsetAsync", std::string(kShare)}] = memset_rate;
  RunValues memset_latency{std::vector<double>(20, 3000.0), 1000, 3'000'000};
  with_new.metrics[{"rank:0", "cuda", "cudaMemsetAsync", std::string(kLatency)}] = memset_latency;
  const Comparison c = compare_runs({synthetic_run("a", 3000, 1)}, {with_new}, 0.1);
  EXPECT_TRUE(c.regressions.empty());
  ASSERT_EQ(c.only_in_candidate.size(), 1u);
  EXPECT_EQ(c.only_in_candidate[0].what, "cudaMemsetAsync");
  EXPECT_EQ(c.only_in_candidate[0].calls, 1000u);
  EXPECT_NEAR(c.only_in_candidate[0].per_s, 500, 1e-9);
  // One new API beside two that both sides call: the same job.
  for (const std::string& note : c.notes) EXPECT_EQ(note.find("same job"), std::string::npos);
}

TEST(CompareRuns, RunsOfDifferentJobsSaySo) {
  // The candidate's process is another one altogether: nothing matches, and "no regression"
  // alone would mislead.
  RunData other;
  other.dir = "other";
  other.seconds = 2;
  other.windows = 20;
  for (const char* metric : {"latency", "share of calls"}) {
    other.metrics[{"comm:cuda_calls", "cuda", "cudaMalloc", metric}] =
        RunValues{std::vector<double>(20, 1.0), 3000, 3'000'000};
  }
  const Comparison c = compare_runs({synthetic_run("a", 3000, 1)}, {other}, 0.1);
  EXPECT_TRUE(c.regressions.empty());
  size_t notes = 0;
  for (const std::string& note : c.notes) notes += note.find("same job") != std::string::npos;
  EXPECT_EQ(notes, 2u);  // each side's unmatched APIs
}

TEST(CompareRuns, EventsUseThePoissonTestOverWholeRuns) {
  RunData base = synthetic_run("a", 3000, 1), candidate = synthetic_run("b", 3000, 2);
  const MetricKey populate{"rank:0", "os", "MAP_POPULATE mmaps", std::string(kEventRate)};
  base.metrics[populate].count = 24;        // 12 a second
  candidate.metrics[populate].count = 434;  // 217 a second: seed 000's storm
  const Comparison c = compare_runs({base}, {candidate}, 0.1);
  ASSERT_EQ(c.regressions.size(), 1u);
  EXPECT_EQ(c.regressions[0].key, populate);
  EXPECT_NEAR(c.regressions[0].base, 12, 1e-9);
  EXPECT_NEAR(c.regressions[0].candidate, 217, 1e-9);
  EXPECT_FALSE(c.regressions[0].time_share.has_value());
}

TEST(CompareRuns, ARunThatBarelyDiffersDoesNotAgree) {
  // Two candidate runs: one clearly slower (x1.5), one a hair slower (x1.02). The pooled windows
  // differ and every candidate run is beyond the base, but the second by too little to say so:
  // one run alone makes no change.
  const Comparison c =
      compare_runs({synthetic_run("a", 3000, 1), synthetic_run("b", 3000, 2)},
                   {synthetic_run("c", 4500, 3), synthetic_run("d", 3060, 4)}, 0.1);
  EXPECT_TRUE(c.regressions.empty());
  const Comparison both =
      compare_runs({synthetic_run("a", 3000, 1), synthetic_run("b", 3000, 2)},
                   {synthetic_run("c", 4500, 3), synthetic_run("d", 4000, 4)}, 0.1);
  EXPECT_EQ(both.regressions.size(), 1u);
}

TEST(CompareRuns, EventsPerRunMustMoveWithTheirRate) {
  // Every run makes the same 1858 start-up mappings; the candidates ran faster, so their rate is
  // higher: a change of the runs' length, not of the mappings.
  const MetricKey mmaps{"rank:0", "os", "mmaps", std::string(kEventRate)};
  std::vector<RunData> base, faster;
  for (int i = 0; i < 3; ++i) {
    base.push_back(synthetic_run("a" + std::to_string(i), 3000, i, 50));    // 5 s
    faster.push_back(synthetic_run("b" + std::to_string(i), 3000, i, 35));  // 3.5 s
    base.back().metrics[mmaps].count = 1858;
    faster.back().metrics[mmaps].count = 1858;
  }
  const Comparison same_counts = compare_runs(base, faster, 0.1);
  for (const Change& r : same_counts.regressions) EXPECT_NE(r.key, mmaps);
  // Twice the mappings in each faster run: more mappings, a regression.
  for (RunData& r : faster) r.metrics[mmaps].count = 3716;
  const Comparison more = compare_runs(base, faster, 0.1);
  size_t found = 0;
  for (const Change& r : more.regressions) found += r.key == mmaps;
  EXPECT_EQ(found, 1u);
}

TEST(CompareRuns, JsonShape) {
  const Comparison c =
      compare_runs({synthetic_run("a", 3000, 1)}, {synthetic_run("b", 4500, 2)}, 0.1);
  const auto j = report_json(c, Thresholds{});
  ASSERT_EQ(j["regressions"].size(), 1u);
  const auto& r = j["regressions"][0];
  for (const char* key : {"layer", "what", "process", "metric", "unit", "base", "candidate",
                          "ratio", "confidence", "p_value", "effect", "time_share"}) {
    EXPECT_TRUE(r.contains(key)) << key;
  }
  EXPECT_EQ(r["layer"], "cuda");
  EXPECT_GT(r["confidence"].get<double>(), 0.99);
  EXPECT_EQ(j["unchanged"], 1);
  EXPECT_TRUE(j["improvements"].empty());
  const std::string text = report_text(c);
  EXPECT_NE(text.find("1 regression:\n  cuda cudaLaunchKernel [rank:0] latency: 3."),
            std::string::npos)
      << text;
  EXPECT_EQ(format_value(4500, "ns"), "4.50 us");
  EXPECT_EQ(format_value(266.5 * 1024 * 1024, "bytes"), "266.5 MiB");
}

// A session database with the columns compare reads, written by hand.
class SessionDb {
 public:
  explicit SessionDb(const std::string& dir) {
    sqlite3_open((dir + "/events.sqlite").c_str(), &db_);
    exec("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT)");
    exec(
        "INSERT INTO meta VALUES ('schema_version', '1'), ('start_ns', '0'), "
        "('end_ns', '1000000000')");
    exec(
        "CREATE TABLE processes (pid INTEGER PRIMARY KEY, ppid INTEGER, comm TEXT, rank "
        "INTEGER, end_ns INTEGER, role TEXT)");
    exec("INSERT INTO processes VALUES (7, 1, 'python', 0, NULL, 'rank')");
    exec(
        "CREATE TABLE calls (id INTEGER PRIMARY KEY, pid INTEGER, tid INTEGER, layer TEXT, name "
        "TEXT, start_ns INTEGER, duration_ns INTEGER, ret INTEGER, error TEXT, bytes INTEGER, "
        "depth INTEGER, args TEXT, inner_call INTEGER, kernel TEXT)");
  }
  ~SessionDb() { sqlite3_close(db_); }
  void exec(const std::string& sql) {
    ASSERT_EQ(sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, nullptr), SQLITE_OK) << sql;
  }
  // Rows in arrival order (children return before their parent).
  void call(int tid, const char* layer, const char* name, uint64_t start, uint64_t duration,
            int depth, bool inner = false, const char* kernel = nullptr) {
    exec(fmt::format(
        "INSERT INTO calls (pid, tid, layer, name, start_ns, duration_ns, ret, error, bytes, "
        "depth, args, inner_call, kernel) VALUES (7, {}, '{}', '{}', {}, {}, 0, NULL, 0, {}, "
        "'{{}}', {}, {})",
        tid, layer, name, start, duration, depth, inner ? 1 : 0,
        kernel ? fmt::format("'{}'", kernel) : "NULL"));
  }
  // A call of any process with the bytes it moved and its arguments; returns its id.
  int64_t row(int pid, int tid, const char* layer, const char* name, uint64_t start,
              uint64_t duration, uint64_t bytes, const char* args = "{}") {
    exec(fmt::format(
        "INSERT INTO calls (pid, tid, layer, name, start_ns, duration_ns, ret, error, bytes, "
        "depth, args, inner_call, kernel) VALUES ({}, {}, '{}', '{}', {}, {}, 0, NULL, {}, 0, "
        "'{}', 0, NULL)",
        pid, tid, layer, name, start, duration, bytes, args));
    return sqlite3_last_insert_rowid(db_);
  }

 private:
  sqlite3* db_ = nullptr;
};

TEST(RunData, TorchSelfTimeKernelsAndInnerCalls) {
  TempDir dir("eacgm-compare");
  {
    SessionDb db(dir.path().string());
    // aten::linear (100 us) holds aten::addmm (60 us), which holds a launch (10 us) whose driver
    // call (8 us) is the launch's own work; thread 2 runs an operator alone.
    db.call(1, "driver", "cuLaunchKernel", 10'000, 8'000, 3, /*inner=*/true, "_Z3fooPf");
    db.call(1, "cuda", "cudaLaunchKernel", 10'000, 10'000, 2, false, "_Z3fooPf");
    db.call(1, "torch", "aten::addmm", 5'000, 60'000, 1);
    db.call(1, "torch", "aten::linear", 0, 100'000, 0);
    db.call(2, "torch", "aten::addmm", 200'000, 30'000, 0);
  }
  auto run = load_run(dir.path().string());
  ASSERT_TRUE(run.ok()) << run.error().message;
  const RunData data = measure_run(*run, 100'000'000);
  EXPECT_EQ(data.windows, 10u);
  auto values = [&](const char* layer, const char* what, std::string_view metric) {
    auto it = data.metrics.find({"rank:0", layer, what, std::string(metric)});
    return it == data.metrics.end() ? RunValues{} : it->second;
  };
  // Self time per window (both calls in window 0): the median of 50 us and 30 us.
  EXPECT_EQ(values("torch", "aten::addmm", kSelfTime).windows, std::vector<double>{40'000});
  EXPECT_EQ(values("torch", "aten::linear", kSelfTime).windows, std::vector<double>{40'000});
  EXPECT_EQ(values("torch", "aten::addmm", kSelfTime).count, 2u);
  // Kernels by the name people read.
  const RunValues launches = values("cuda", "foo(float*)", kLaunchLatency);
  EXPECT_EQ(launches.count, 1u);
  EXPECT_EQ(launches.windows, std::vector<double>{10'000});
  // The inner driver call is not a call of its own.
  EXPECT_EQ(values("driver", "cuLaunchKernel", kLatency).count, 0u);
  EXPECT_EQ(values("driver", "foo(float*)", kLaunchLatency).count, 0u);
}

// Events a session lost, to a full ring buffer or as records it could not decode, say that its
// calls are incomplete: compare and slo note both.
TEST(RunData, DroppedAndUndecodableEventsAreLost) {
  TempDir dir("eacgm-compare");
  {
    SessionDb db(dir.path().string());
    db.call(1, "cuda", "cudaMalloc", 0, 1'000, 0);
  }
  std::ofstream(dir.path() / "summary.json")
      << R"({"events": {"recorded": 1, "dropped": 2, "undecodable": 3}})";
  auto run = load_run(dir.path().string());
  ASSERT_TRUE(run.ok()) << run.error().message;
  EXPECT_EQ(measure_run(*run, 100'000'000).events_dropped, 5u);
}

// Processes that share a key (two DataLoader workers of rank 0) pool their calls: each API's
// figures cover both, not whichever process came last.
TEST(RunData, ProcessesOfOneKeyPoolTheirCalls) {
  TempDir dir("eacgm-compare");
  {
    SessionDb db(dir.path().string());
    db.exec("INSERT INTO processes VALUES (8, 7, 'pt_data_worker', 0, NULL, 'worker')");
    db.exec("INSERT INTO processes VALUES (9, 7, 'pt_data_worker', 0, NULL, 'worker')");
    db.row(8, 8, "torch", "aten::add", 1'000, 10'000, 0);
    db.row(8, 8, "torch", "aten::add", 20'000, 10'000, 0);
    db.row(9, 9, "torch", "aten::add", 40'000, 30'000, 0);
    db.row(9, 9, "torch", "aten::mul", 80'000, 5'000, 0);
  }
  auto run = load_run(dir.path().string());
  ASSERT_TRUE(run.ok()) << run.error().message;
  const RunData data = measure_run(*run, 100'000'000);
  auto values = [&](const char* what, std::string_view metric) {
    auto it = data.metrics.find({"worker:rank:0", "torch", what, std::string(metric)});
    return it == data.metrics.end() ? RunValues{} : it->second;
  };
  EXPECT_EQ(values("aten::add", kLatency).count, 3u);
  EXPECT_EQ(values("aten::add", kLatency).total_ns, 50'000u);
  EXPECT_EQ(values("aten::add", kLatency).windows, std::vector<double>{10'000});
  EXPECT_EQ(values("aten::mul", kLatency).count, 1u);
  // Three of the key's four calls, in its one window, in percent.
  EXPECT_EQ(values("aten::add", kShare).windows, std::vector<double>{75.0});
}

TEST(RunData, BadSessionsAreOneLineErrors) {
  TempDir dir("eacgm-compare");
  auto missing = load_run((dir.path() / "nowhere").string());
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().message.find("no such session directory"), std::string::npos);
  const std::string empty = dir.mkdirs("empty");
  { SessionDb db(empty); }
  auto no_calls = load_run(empty);
  ASSERT_FALSE(no_calls.ok());
  EXPECT_NE(no_calls.error().message.find("no traced calls"), std::string::npos);
  const std::string corrupt = dir.mkdirs("corrupt");
  std::ofstream(corrupt + "/events.sqlite") << std::string(4096, 'x');
  auto bad = load_run(corrupt);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("not an eacgm session database"), std::string::npos);
  const std::string bad_summary = dir.mkdirs("bad_summary");
  {
    SessionDb db(bad_summary);
    db.call(1, "cuda", "cudaMalloc", 0, 1000, 0);
  }
  std::ofstream(bad_summary + "/summary.json") << "{ not json";
  auto summary = load_run(bad_summary);
  ASSERT_FALSE(summary.ok());
  EXPECT_NE(summary.error().message.find("summary.json"), std::string::npos);
}

// Two ranks' NCCL calls: ranks 0 (pid 7) and 1 (pid 8), 100-ms windows over one second.
TEST(RunData, CollectiveLatenessAndNcclBandwidth) {
  TempDir dir("eacgm-compare");
  {
    SessionDb db(dir.path().string());
    db.exec("INSERT INTO processes VALUES (8, 1, 'python', 1, NULL, 'rank')");
    db.exec(
        "CREATE TABLE collectives (call_id INTEGER PRIMARY KEY, comm TEXT, rank INTEGER, nranks "
        "INTEGER, seq INTEGER)");
    constexpr uint64_t kBytes = 8'000'000;
    auto collective = [&](int rank, const char* comm, int seq, uint64_t start, uint64_t duration) {
      const int64_t id =
          db.row(7 + rank, 70 + rank, "nccl", "ncclAllReduce", start, duration, kBytes);
      db.exec(
          fmt::format("INSERT INTO collectives VALUES ({}, '{}', {}, 2, {})", id, comm, rank, seq));
    };
    // seq 1: rank 1 enters 500 us after rank 0; seq 2: 10 ms after, its entry in the next window
    // (the collective counts in the window of its earliest entry); seq 3: rank 0 is the late one.
    collective(0, "c1", 1, 10 * kMs, 2 * kMs);        // 4 GB/s
    collective(1, "c1", 1, 10'500'000, 1 * kMs);      // 8 GB/s
    collective(0, "c1", 2, 95 * kMs, 16 * kMs);       // 0.5 GB/s
    collective(1, "c1", 2, 105 * kMs, 4 * kMs);       // 2 GB/s, window 1
    collective(1, "c1", 3, 150 * kMs, 1 * kMs);       // 8 GB/s
    collective(0, "c1", 3, 150'200'000, 2 * kMs);     // 4 GB/s
    collective(0, "c1", 4, 300 * kMs, 8 * kMs);       // seen on one rank only: no lateness
    collective(0, "world", 1, 400 * kMs, 1 * kMs);    // the assumed communicator counts too
    collective(1, "world", 1, 400'100'000, 1 * kMs);  // 100 us late
    // A send inside a group returns at once: no bandwidth. The group ends, so the broadcast after
    // it counts. Calls of other layers never have one.
    db.row(7, 70, "nccl", "ncclGroupStart", 450 * kMs, 1000, 0);
    db.row(7, 70, "nccl", "ncclSend", 450'010'000, 1000, kBytes);
    db.row(7, 70, "nccl", "ncclGroupEnd", 450'020'000, 5 * kMs, 0);
    db.row(7, 70, "nccl", "ncclBroadcast", 500 * kMs, 1 * kMs, 1'000'000);  // 1 GB/s
    db.row(7, 70, "cuda", "cudaMemcpy", 600 * kMs, 1 * kMs, kBytes);
  }
  auto run = load_run(dir.path().string());
  ASSERT_TRUE(run.ok()) << run.error().message;
  EXPECT_EQ(run->collectives.size(), 9u);
  const RunData data = measure_run(*run, 100 * kMs);
  auto values = [&](const char* process, const char* what, std::string_view metric) {
    auto it = data.metrics.find({process, "nccl", what, std::string(metric)});
    return it == data.metrics.end() ? RunValues{} : it->second;
  };
  // Rank 0: 0 and 0 in window 0, 200 us in window 1, 0 in window 4 (world).
  const RunValues late0 = values("rank:0", "all collectives", kLateness);
  EXPECT_EQ(late0.windows, (std::vector<double>{0, 200'000, 0}));
  EXPECT_EQ(late0.count, 4u);
  EXPECT_EQ(late0.total_ns, 200'000u);
  // Rank 1: the median of 500 us and 10 ms in window 0, 0 in window 1, 100 us in window 4.
  const RunValues late1 = values("rank:1", "all collectives", kLateness);
  EXPECT_EQ(late1.windows, (std::vector<double>{5'250'000, 0, 100'000}));
  EXPECT_EQ(late1.count, 4u);
  EXPECT_EQ(late1.total_ns, 10'600'000u);
  EXPECT_EQ(metric_info(kLateness).unit, "ns");
  EXPECT_EQ(metric_info(kLateness).cost_floor, CostFloor::kLateness);

  // Bandwidth per window (by each call's own start): rank 0 {4, 0.5} {4} {1} {8}.
  const RunValues bw0 = values("rank:0", "ncclAllReduce", kBandwidth);
  EXPECT_EQ(bw0.windows, (std::vector<double>{2.25, 4, 1, 8}));
  EXPECT_EQ(bw0.count, 5u);
  EXPECT_EQ(bw0.total_ns, 29 * kMs);
  EXPECT_EQ(values("rank:1", "ncclAllReduce", kBandwidth).windows, (std::vector<double>{8, 5, 8}));
  EXPECT_EQ(values("rank:0", "ncclBroadcast", kBandwidth).windows, std::vector<double>{1});
  EXPECT_EQ(values("rank:0", "ncclSend", kBandwidth).count, 0u);
  EXPECT_EQ(data.metrics.count({"rank:0", "cuda", "cudaMemcpy", std::string(kBandwidth)}), 0u);
  EXPECT_FALSE(metric_info(kBandwidth).higher_is_worse);
  EXPECT_EQ(metric_info(kBandwidth).unit, "GB/s");
}

// Figures kept for the whole run only: each run gives one value.
TEST(RunData, PerRunValuesFromPythonSamplesAndTheSummary) {
  TempDir dir("eacgm-compare");
  const std::string ok = dir.mkdirs("ok");
  {
    SessionDb db(ok);
    db.row(7, 7, "cuda", "cudaMalloc", 1 * kMs, 6000, kMiB,
           R"({"devPtr": "0x7c0000000000", "size": 1048576})");
    db.exec(
        "CREATE TABLE python_functions (function TEXT PRIMARY KEY, file TEXT, first_line "
        "INTEGER, count INTEGER, samples INTEGER NOT NULL, total_ns INTEGER NOT NULL, self_ns "
        "INTEGER NOT NULL)");
    db.exec(
        "INSERT INTO python_functions VALUES ('train.py:step', 'train.py', 3, NULL, 40, 900, "
        "300), ('data.py:load', 'data.py', 9, NULL, 20, 100, 100), ('train.py:main', "
        "'train.py', 1, NULL, 50, 1000, 0)");
  }
  std::ofstream(ok + "/summary.json") << R"({
    "exit_code": 0,
    "processes": [{"pid": 7, "exit": {"code": 0, "signal": null, "cause": "exited with 0"}}],
    "layers": {"os": {"status": "active",
      "mmap": {"7": {"mmaps": 4, "bytes_mapped": 3000000, "populate": {"count": 0}}},
      "ioctl": {"processes": {"7": {"/dev/nvidiactl": {"count": 4, "total_ns": 10000},
                                    "/dev/nvidia0": {"count": 0, "total_ns": 0}}}}}},
    "memory": {"outstanding_device_bytes": {"7": 1048576}}})";
  auto run = load_run(ok);
  ASSERT_TRUE(run.ok()) << run.error().message;
  const RunData data = measure_run(*run, 100 * kMs);
  auto values = [&](const char* process, const char* layer, const char* what,
                    std::string_view metric) {
    auto it = data.metrics.find({process, layer, what, std::string(metric)});
    return it == data.metrics.end() ? RunValues{} : it->second;
  };
  // Self time over all sampled self time (400 ns): 75 %, 25 %, 0 %.
  EXPECT_EQ(values("job", "python", "train.py:step", kPythonShare).windows,
            std::vector<double>{75});
  EXPECT_EQ(values("job", "python", "train.py:step", kPythonShare).count, 40u);
  EXPECT_EQ(values("job", "python", "data.py:load", kPythonShare).windows, std::vector<double>{25});
  EXPECT_EQ(values("job", "python", "train.py:main", kPythonShare).windows, std::vector<double>{0});
  // 3 MB mapped in a one-second run; 10 us over 4 ioctls; a device without ioctls has no mean.
  EXPECT_EQ(values("rank:0", "os", "mmaps", kMmapBytesRate).windows,
            std::vector<double>{3'000'000});
  EXPECT_EQ(values("rank:0", "os", "mmaps", kMmapBytesRate).count, 4u);
  EXPECT_EQ(values("rank:0", "os", "/dev/nvidiactl", kIoctlLatency).windows,
            std::vector<double>{2500});
  EXPECT_EQ(values("rank:0", "os", "/dev/nvidiactl", kIoctlLatency).count, 4u);
  EXPECT_EQ(data.metrics.count({"rank:0", "os", "/dev/nvidia0", std::string(kIoctlLatency)}), 0u);
  // Held at the end, with the one allocation behind it.
  EXPECT_EQ(values("rank:0", "memory", "device memory", kMemoryAtEnd).windows,
            std::vector<double>{1048576});
  EXPECT_EQ(values("rank:0", "memory", "device memory", kMemoryAtEnd).count, 1u);
  // A job that ended well.
  EXPECT_EQ(values("job", "job", "exit", kAbnormalRuns).windows, std::vector<double>{0});
  EXPECT_EQ(values("job", "job", "exit", kAbnormalRuns).count, 1u);
  for (std::string_view m : {kPythonShare, kMemoryAtEnd, kMmapBytesRate, kIoctlLatency}) {
    EXPECT_EQ(metric_info(m).sampling, Sampling::kRuns) << m;
  }
  EXPECT_EQ(metric_info(kAbnormalRuns).sampling, Sampling::kOutcomes);

  // A rank killed: the run ended abnormally. Without a summary, how it ended is unknown.
  const std::string killed = dir.mkdirs("killed");
  {
    SessionDb db(killed);
    db.call(1, "cuda", "cudaMalloc", 0, 1000, 0);
  }
  std::ofstream(killed + "/summary.json") << R"({"exit_code": 137, "processes": [{"pid": 7,
    "exit": {"code": null, "signal": 9, "cause": "killed by SIGKILL"}}]})";
  auto k = load_run(killed);
  ASSERT_TRUE(k.ok()) << k.error().message;
  const RunData kd = measure_run(*k, 100 * kMs);
  EXPECT_EQ(kd.metrics.at({"job", "job", "exit", std::string(kAbnormalRuns)}).windows,
            std::vector<double>{100});
  EXPECT_EQ(kd.end.causes, std::vector<std::string>{"rank:0: killed by SIGKILL"});
  std::filesystem::remove(killed + "/summary.json");
  auto unknown = load_run(killed);
  ASSERT_TRUE(unknown.ok());
  EXPECT_EQ(measure_run(*unknown, 100 * kMs)
                .metrics.count({"job", "job", "exit", std::string(kAbnormalRuns)}),
            0u);
}

// A synthetic run with one per-run value (python share by default) beside the usual calls.
RunData run_with(const std::string& dir, double value, int seed,
                 std::string_view metric = kPythonShare, const char* what = "train.py:step") {
  RunData r = synthetic_run(dir, 3000, seed);
  r.metrics[{"job", "python", what, std::string(metric)}] = RunValues{{value}, 50, 0};
  return r;
}

const Change* find_change(const Comparison& c, std::string_view metric) {
  for (const auto* list : {&c.regressions, &c.improvements, &c.others}) {
    for (const Change& ch : *list) {
      if (ch.key.metric == metric) return &ch;
    }
  }
  return nullptr;
}

TEST(CompareRuns, PerRunValuesNeedSeveralRunsASide) {
  // One run a side: no outcome of the rank test over runs could be significant: too few, however
  // far apart the values are.
  const Comparison one = compare_runs({run_with("a", 10, 1)}, {run_with("b", 40, 2)}, 0.1);
  const Change* c = find_change(one, kPythonShare);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->verdict, Verdict::kTooFew);
  EXPECT_TRUE(one.regressions.empty());
  // Four a side: at best p = 2 / C(8, 4) = 0.029, still too few.
  std::vector<RunData> base, candidate;
  for (int i = 0; i < 4; ++i) {
    base.push_back(run_with("b" + std::to_string(i), 10 + 0.5 * i, i));
    candidate.push_back(run_with("c" + std::to_string(i), 40 + 0.5 * i, 10 + i));
  }
  EXPECT_EQ(find_change(compare_runs(base, candidate, 0.1), kPythonShare)->verdict,
            Verdict::kTooFew);
  // Five a side, fully apart: p = 2 / C(10, 5) = 2/252, exact, a regression.
  base.push_back(run_with("b4", 9, 4));
  candidate.push_back(run_with("c4", 39, 14));
  const Comparison five = compare_runs(base, candidate, 0.1);
  ASSERT_EQ(five.regressions.size(), 1u);
  const Change& r = five.regressions[0];
  EXPECT_EQ(r.key, (MetricKey{"job", "python", "train.py:step", std::string(kPythonShare)}));
  EXPECT_EQ(r.base, 10.5);  // the median of 10, 10.5, 11, 11.5, 9
  EXPECT_EQ(r.candidate, 40.5);
  EXPECT_NEAR(r.p, 2.0 / 252, 1e-12);
  EXPECT_DOUBLE_EQ(r.delta, 1);
  EXPECT_EQ(r.base_samples, 5u);
  EXPECT_FALSE(r.time_share.has_value());
  const auto j = report_json(five, Thresholds{});
  EXPECT_EQ(j["regressions"][0]["test"], "mann-whitney-exact");
  EXPECT_EQ(j["regressions"][0]["samples"], "runs");
  EXPECT_EQ(j["regressions"][0]["unit"], "%");
}

TEST(CompareRuns, AFunctionNotSampledHadNoShare) {
  std::vector<RunData> base, candidate;
  for (int i = 0; i < 5; ++i) {
    base.push_back(run_with("b" + std::to_string(i), 30 + i, i));
    // The candidate sampled Python, but never caught train.py:step.
    candidate.push_back(
        run_with("c" + std::to_string(i), 100, 10 + i, kPythonShare, "train.py:other"));
  }
  // A run that sampled no Python at all says nothing of the function.
  candidate.push_back(synthetic_run("c5", 3000, 15));
  const Comparison c = compare_runs(base, candidate, 0.1);
  const Change* step = nullptr;
  for (const Change& ch : c.improvements) {
    if (ch.key.what == "train.py:step") step = &ch;
  }
  ASSERT_NE(step, nullptr);
  EXPECT_EQ(step->candidate, 0);
  EXPECT_EQ(step->candidate_samples, 5u);
  EXPECT_EQ(step->base, 32);
  // What the test compared, for drawing it: the zeros included.
  EXPECT_EQ(pooled_samples(candidate, step->key, step->info), std::vector<double>(5, 0.0));
  EXPECT_EQ(pooled_samples(base, step->key, step->info), (std::vector<double>{30, 31, 32, 33, 34}));
}

TEST(FisherExact, AgainstTheHypergeometricByHand) {
  // 1 of 6 against 5 of 6: tables a = 0, 1, 5, 6 are at most as likely: (1 + 36 + 36 + 1) / 924.
  EXPECT_NEAR(fisher_exact_p(1, 6, 5, 6), 74.0 / 924, 1e-12);
  EXPECT_NEAR(fisher_exact_p(0, 5, 5, 5), 2.0 / 252, 1e-12);
  // Unequal sides, 0 of 3 against 3 of 10: (120 + 30 + 1) / C(13, 3).
  EXPECT_NEAR(fisher_exact_p(0, 3, 3, 10), 151.0 / 286, 1e-12);
  EXPECT_EQ(fisher_exact_p(0, 3, 0, 3), 1);
  EXPECT_EQ(fisher_exact_p(3, 3, 3, 3), 1);
}

RunData outcome_run(const std::string& dir, bool abnormal, int seed) {
  RunData r = synthetic_run(dir, 3000, seed);
  r.metrics[{"job", "job", "exit", std::string(kAbnormalRuns)}] =
      RunValues{{abnormal ? 100.0 : 0.0}, 1, 0};
  if (abnormal) {
    r.end.exit_code = 137;
    r.end.causes.push_back("rank:0: killed by SIGKILL");
  } else {
    r.end.exit_code = 0;
  }
  return r;
}

std::vector<RunData> outcome_runs(const std::string& tag, size_t abnormal, size_t runs) {
  std::vector<RunData> out;
  for (size_t i = 0; i < runs; ++i) {
    out.push_back(outcome_run(tag + std::to_string(i), i < abnormal, static_cast<int>(i)));
  }
  return out;
}

TEST(CompareRuns, AbnormalEndsAreARateOverRuns) {
  // Two a side, all failing against none: a note, never a verdict.
  const Comparison two = compare_runs(outcome_runs("b", 0, 2), outcome_runs("c", 2, 2), 0.1);
  EXPECT_TRUE(two.regressions.empty());
  EXPECT_EQ(find_change(two, kAbnormalRuns)->verdict, Verdict::kTooFew);
  ASSERT_EQ(two.notes.size(), 1u);
  EXPECT_EQ(two.notes[0],
            "runs that ended abnormally: base 0 of 2 (0%), candidate 2 of 2 (100%) (rank:0: "
            "killed by SIGKILL; rank:0: killed by SIGKILL): too few runs to tell a change from "
            "chance (Fisher's exact test; at least 3 runs a side, and enough for p < 0.01 to be "
            "possible)");
  // Two against twenty: p = 1/C(22, 2) would be significant, but two runs make no rate.
  EXPECT_EQ(find_change(compare_runs(outcome_runs("b", 0, 20), outcome_runs("c", 2, 2), 0.1),
                        kAbnormalRuns)
                ->verdict,
            Verdict::kTooFew);
  // Five a side, none against all: p = 2/252, a regression.
  const Comparison five = compare_runs(outcome_runs("b", 0, 5), outcome_runs("c", 5, 5), 0.1);
  ASSERT_EQ(five.regressions.size(), 1u);
  const Change& r = five.regressions[0];
  EXPECT_EQ(r.key, (MetricKey{"job", "job", "exit", std::string(kAbnormalRuns)}));
  EXPECT_EQ(r.base, 0);
  EXPECT_EQ(r.candidate, 100);
  EXPECT_NEAR(r.p, 2.0 / 252, 1e-12);
  EXPECT_DOUBLE_EQ(r.delta, 1);
  EXPECT_EQ(report_json(five, Thresholds{})["regressions"][0]["test"], "fisher-exact");
  // One of six against five of six: p = 74/924, no change, and the note says so.
  const Comparison six = compare_runs(outcome_runs("b", 1, 6), outcome_runs("c", 5, 6), 0.1);
  EXPECT_TRUE(six.regressions.empty());
  const Change* u = find_change(six, kAbnormalRuns);
  EXPECT_EQ(u->verdict, Verdict::kUnchanged);
  EXPECT_NEAR(u->p, 74.0 / 924, 1e-12);
  ASSERT_EQ(six.notes.size(), 1u);
  EXPECT_NE(six.notes[0].find("base 1 of 6 (17%)"), std::string::npos) << six.notes[0];
  EXPECT_NE(six.notes[0].find("candidate 5 of 6 (83%)"), std::string::npos) << six.notes[0];
  EXPECT_NE(six.notes[0].find("no significant difference (Fisher's exact test, p = 0.08)"),
            std::string::npos)
      << six.notes[0];
  // Every run ended well: no note.
  EXPECT_TRUE(compare_runs(outcome_runs("b", 0, 3), outcome_runs("c", 0, 3), 0.1).notes.empty());
}

// A run with one rank's collective lateness per window around `late_ns` (200 windows, 300
// collectives a run of two seconds: 150 a second).
RunData lateness_run(const std::string& dir, const std::string& rank, double late_ns, int seed) {
  RunData r = synthetic_run(dir, 3000, seed);
  RunValues v;
  for (size_t w = 0; w < 20; ++w) {
    v.windows.push_back(late_ns * (1 + 0.03 * std::sin(static_cast<double>(w * 7 + seed * 13))));
  }
  v.count = 300;
  r.metrics[{rank, "nccl", "all collectives", std::string(kLateness)}] = v;
  return r;
}

TEST(CompareRuns, LatenessIsJudgedByWhatTheWaitCosts) {
  // Rank 1 turns 2 ms late at 150 collectives a second: the others wait 30 % of the time more.
  RunData b = lateness_run("a", "rank:1", 10'000, 1), c = lateness_run("b", "rank:1", 2e6, 2);
  const Comparison slow = compare_runs({b}, {c}, 0.1);
  ASSERT_EQ(slow.regressions.size(), 1u);
  const Change& r = slow.regressions[0];
  EXPECT_EQ(r.key.metric, kLateness);
  EXPECT_EQ(r.key.process, "rank:1");
  ASSERT_TRUE(r.time_share.has_value());
  EXPECT_NEAR(*r.time_share, (r.candidate - r.base) * 150 / 1e9, 1e-12);
  EXPECT_NEAR(*r.time_share, 0.3, 0.01);
  // Rank 0, which now waits for it, is never the late one any more: 10 us to 0, a clear change
  // by the rank test, but it saves 0.15 % of the time: no improvement of rank 0's.
  const Comparison other = compare_runs({lateness_run("a", "rank:0", 10'000, 1)},
                                        {lateness_run("b", "rank:0", 0, 2)}, 0.1);
  EXPECT_TRUE(other.improvements.empty());
  EXPECT_TRUE(other.regressions.empty());
  const Change* u = find_change(other, kLateness);
  ASSERT_NE(u, nullptr);
  EXPECT_EQ(u->verdict, Verdict::kUnchanged);
  EXPECT_LT(u->p, 1e-6);
}

TEST(Decide, CostFloorAndTooFewSamples) {
  const Thresholds t;
  Evidence e{1e-6, 1.0, 3.0, 1000, 1000, metric_info(kLateness), true};
  e.cost = 0.009;
  EXPECT_EQ(decide(e, t), Verdict::kUnchanged);
  e.cost = 0.01;
  EXPECT_EQ(decide(e, t), Verdict::kRegression);
  // A test that could not have been significant with its samples: too few, not unchanged.
  Evidence latency = latency_evidence(0.2, 1.0, 1.5);
  latency.best_p = 0.1;
  EXPECT_EQ(decide(latency, t), Verdict::kTooFew);
  // Lower bandwidth is worse.
  Evidence bw{1e-6, -1.0, 0.5, 1000, 1000, metric_info(kBandwidth), true};
  EXPECT_EQ(decide(bw, t), Verdict::kRegression);
}

TEST(CompareRuns, LowerNcclBandwidthIsARegression) {
  auto run = [](const std::string& dir, double gbps, int seed) {
    RunData r = synthetic_run(dir, 3000, seed);
    RunValues bw, share;
    for (size_t w = 0; w < 20; ++w) {
      bw.windows.push_back(gbps * (1 + 0.02 * std::cos(static_cast<double>(w + seed))));
      share.windows.push_back(5);
    }
    bw.count = share.count = 400;
    r.metrics[{"rank:0", "nccl", "ncclAllReduce", std::string(kBandwidth)}] = bw;
    r.metrics[{"rank:0", "nccl", "ncclAllReduce", std::string(kShare)}] = share;
    return r;
  };
  const Comparison c = compare_runs({run("a", 40, 1)}, {run("b", 20, 2)}, 0.1);
  ASSERT_EQ(c.regressions.size(), 1u);
  EXPECT_EQ(c.regressions[0].key.metric, kBandwidth);
  EXPECT_NEAR(c.regressions[0].ratio, 0.5, 0.03);
  EXPECT_FALSE(c.regressions[0].time_share.has_value());
  EXPECT_EQ(format_value(40, "GB/s"), "40.00 GB/s");
  EXPECT_EQ(format_value(2.5e6, "bytes/s"), "2.4 MiB/s");
}

}  // namespace
}  // namespace eacgm::compare
