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

Evidence latency_evidence(double p, double delta, double ratio) {
  return Evidence{p, delta, ratio, 1000, 1000, metric_info(kLatency), true};
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

}  // namespace
}  // namespace eacgm::compare
