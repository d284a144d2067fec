// Verdicts across nodes from what each node's serve exports: the hung rank, node or
// communicator and the straggling rank or node, and nothing on a healthy job.
#include "serve/cross_node.h"

#include <gtest/gtest.h>

namespace eacgm {
namespace {

// Rank r of a 4-rank job, ranks 0 and 1 on node a, 2 and 3 on node b.
RankReport rank(int r, uint64_t entered, uint64_t completed, double inside_s, double age_s) {
  return {.node = r < 2 ? "a:9412" : "b:9412",
          .job_id = "job",
          .comm = "c0ffee",
          .rank = r,
          .pid = static_cast<uint32_t>(100 + r),
          .nranks = 4,
          .entered_seq = entered,
          .completed_seq = completed,
          .inside_s = inside_s,
          .progress_age_s = age_s};
}

std::vector<int> ranks_of(const std::vector<RankReport>& ranks) {
  std::vector<int> out;
  for (const RankReport& r : ranks) out.push_back(r.rank);
  return out;
}

const CrossNodeOptions kOptions{.hang_timeout_s = 10};

TEST(CrossNodeHang, AWholeNodeThatNeverEnteredIsNamed) {
  // Node a's ranks wait in collective 58; node b's finished 57 and never came.
  const auto hangs = find_cross_node_hangs({rank(0, 58, 57, 30, 30), rank(1, 58, 57, 31, 31),
                                            rank(2, 57, 57, 0, 30.5), rank(3, 57, 57, 0, 30.2)},
                                           kOptions);
  ASSERT_EQ(hangs.size(), 1u);
  const CrossNodeHang& h = hangs[0];
  EXPECT_EQ(h.kind, "missing");
  EXPECT_EQ(h.seq, 58u);
  EXPECT_EQ(ranks_of(h.culprits), (std::vector<int>{2, 3}));
  EXPECT_EQ(ranks_of(h.waiting), (std::vector<int>{0, 1}));
  EXPECT_EQ(h.whole_node, "b:9412");
  EXPECT_DOUBLE_EQ(h.waited_s, 30);
  EXPECT_EQ(describe(h),
            "job job, communicator c0ffee (4 ranks) waits in collective 58 for 30 s; never "
            "entered it: every rank of node b:9412: rank 2 (pid 102 on node b:9412, last "
            "completed collective 57, for 30 s), rank 3 (pid 103 on node b:9412, last completed "
            "collective 57, for 30 s)");
}

TEST(CrossNodeHang, OneRankOfANodeIsNamedNotItsNode) {
  const auto hangs = find_cross_node_hangs(
      {rank(0, 9, 8, 20, 20), rank(1, 9, 8, 20, 20), rank(2, 9, 8, 20, 20), rank(3, 8, 8, 0, 21)},
      kOptions);
  ASSERT_EQ(hangs.size(), 1u);
  EXPECT_EQ(ranks_of(hangs[0].culprits), (std::vector<int>{3}));
  EXPECT_FALSE(hangs[0].whole_node);
}

TEST(CrossNodeHang, EveryRankInsideAndNoneReturned) {
  const auto hangs = find_cross_node_hangs(
      {rank(0, 9, 8, 20, 20), rank(1, 9, 8, 25, 25), rank(2, 9, 8, 12, 12), rank(3, 9, 8, 19, 19)},
      kOptions);
  ASSERT_EQ(hangs.size(), 1u);
  EXPECT_EQ(hangs[0].kind, "stuck");
  EXPECT_TRUE(hangs[0].culprits.empty());
  EXPECT_DOUBLE_EQ(hangs[0].waited_s, 12);
  EXPECT_NE(describe(hangs[0]).find("entered collective 9 and none returned for 12 s"),
            std::string::npos);
}

TEST(CrossNodeHang, RanksNoNodeReportsWhileTheOthersWait) {
  const auto hangs =
      find_cross_node_hangs({rank(0, 9, 8, 20, 20), rank(1, 9, 8, 20, 20)}, kOptions);
  ASSERT_EQ(hangs.size(), 1u);
  EXPECT_EQ(hangs[0].kind, "untraced");
  EXPECT_EQ(hangs[0].untraced_ranks, (std::vector<int>{2, 3}));
  // Gone ranks while the reported ones are in no collective: the job may just be ending.
  EXPECT_TRUE(
      find_cross_node_hangs({rank(0, 9, 9, 0, 20), rank(1, 9, 9, 0, 20)}, kOptions).empty());
}

TEST(CrossNodeHang, NothingWhileTheCommunicatorMovesOrIsIdle) {
  // Healthy, mid-step: one rank a collective ahead, moments ago.
  EXPECT_TRUE(find_cross_node_hangs({rank(0, 9, 8, 0.01, 0.01), rank(1, 9, 8, 0.02, 0.02),
                                     rank(2, 8, 8, 0, 0.05), rank(3, 9, 8, 0.001, 0.001)},
                                    kOptions)
                  .empty());
  // Idle for a minute (evaluation, a checkpoint), every rank level and in no collective.
  EXPECT_TRUE(find_cross_node_hangs({rank(0, 9, 9, 0, 60), rank(1, 9, 9, 0, 60),
                                     rank(2, 9, 9, 0, 60), rank(3, 9, 9, 0, 60)},
                                    kOptions)
                  .empty());
  // Long inside, but a rank made progress recently: a slow collective, not a hang.
  EXPECT_TRUE(find_cross_node_hangs({rank(0, 9, 8, 20, 20), rank(1, 9, 8, 20, 20),
                                     rank(2, 9, 8, 20, 20), rank(3, 9, 8, 5, 5)},
                                    kOptions)
                  .empty());
}

TEST(CrossNodeHang, UnnumberedRanksAreJudgedByWhoIsInside) {
  std::vector<RankReport> ranks = {rank(0, 0, 0, 30, 30), rank(1, 0, 0, 30, 30),
                                   rank(2, 0, 0, 0, 31), rank(3, 0, 0, 0, 31)};
  for (RankReport& r : ranks) {
    r.entered_seq.reset();
    r.completed_seq.reset();
    r.comm = "world";
  }
  const auto hangs = find_cross_node_hangs(ranks, kOptions);
  ASSERT_EQ(hangs.size(), 1u);
  EXPECT_FALSE(hangs[0].seq);
  EXPECT_EQ(ranks_of(hangs[0].culprits), (std::vector<int>{2, 3}));
  EXPECT_EQ(hangs[0].whole_node, "b:9412");
}

TEST(CrossNodeHang, CommunicatorsAndJobsAreJudgedApart) {
  std::vector<RankReport> ranks = {rank(0, 9, 8, 20, 20), rank(1, 8, 8, 0, 20)};
  RankReport other_job = rank(2, 3, 3, 0, 0.1);
  other_job.job_id = "other";
  ranks.push_back(other_job);
  ranks[0].nranks = ranks[1].nranks = 2;
  const auto hangs = find_cross_node_hangs(ranks, kOptions);
  ASSERT_EQ(hangs.size(), 1u);
  EXPECT_EQ(hangs[0].job_id, "job");
  EXPECT_EQ(ranks_of(hangs[0].culprits), (std::vector<int>{1}));
}

RankWait wait(int r, double mean_ms, double collectives = 100) {
  return {.node = r < 2 ? "a:9412" : "b:9412",
          .job_id = "job",
          .comm = "c0ffee",
          .rank = r,
          .pid = static_cast<uint32_t>(100 + r),
          .collectives = collectives,
          .mean_s = mean_ms / 1e3};
}

std::vector<int> ranks_of(const std::vector<RankWait>& ranks) {
  std::vector<int> out;
  for (const RankWait& r : ranks) out.push_back(r.rank);
  return out;
}

TEST(CrossNodeStraggler, TheRankThatWaitsLeastIsNamed) {
  const auto s = find_cross_node_stragglers(
      {{wait(0, 16.1), wait(1, 15.8), wait(2, 16.4), wait(3, 1.1)}}, CrossNodeOptions{});
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(ranks_of(s[0].stragglers), (std::vector<int>{3}));
  EXPECT_FALSE(s[0].whole_node);
  EXPECT_NEAR(s[0].straggler_mean_s, 0.0011, 1e-12);
  EXPECT_NEAR(s[0].others_mean_s, 0.0158, 1e-12);
  EXPECT_EQ(describe(s[0]),
            "rank 3 (pid 103 on node b:9412) of job job, communicator c0ffee waits least: 1.1 ms "
            "per collective against at least 15.8 ms for the others (the others wait for it), in "
            "1 of 1 time slices");
}

TEST(CrossNodeStraggler, ASlowNodeIsNamedAsTheNode) {
  const auto s = find_cross_node_stragglers(
      {{wait(0, 16.1), wait(1, 15.8), wait(2, 1.4), wait(3, 1.1)}}, CrossNodeOptions{});
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(ranks_of(s[0].stragglers), (std::vector<int>{2, 3}));
  EXPECT_EQ(s[0].whole_node, "b:9412");
}

TEST(CrossNodeStraggler, HealthyRanksAndUnclearGapsYieldNothing) {
  const CrossNodeOptions o;
  // Alike within a millisecond.
  EXPECT_TRUE(
      find_cross_node_stragglers({{wait(0, 3.1), wait(1, 2.6), wait(2, 3.4), wait(3, 2.9)}}, o)
          .empty());
  // A wide spread with no clear gap: the ranks simply differ.
  EXPECT_TRUE(
      find_cross_node_stragglers({{wait(0, 2), wait(1, 8), wait(2, 14), wait(3, 20)}}, o).empty());
  // Three of four "wait least": a majority is no straggler (it is the one rank that waits most
  // that is odd: it arrives first, which is no one's delay).
  EXPECT_TRUE(find_cross_node_stragglers({{wait(0, 1), wait(1, 1.2), wait(2, 1.1), wait(3, 30)}}, o)
                  .empty());
  // Too few collectives to judge.
  EXPECT_TRUE(find_cross_node_stragglers(
                  {{wait(0, 16, 5), wait(1, 16, 5), wait(2, 16, 5), wait(3, 1, 5)}}, o)
                  .empty());
}

TEST(CrossNodeStraggler, ItMustPersistAcrossSlices) {
  const CrossNodeOptions o;
  const std::vector<RankWait> slow3 = {wait(0, 16), wait(1, 16), wait(2, 16), wait(3, 1)};
  const std::vector<RankWait> healthy = {wait(0, 2), wait(1, 2.2), wait(2, 2.1), wait(3, 1.9)};
  // Newest first: slow now and before.
  EXPECT_EQ(find_cross_node_stragglers({slow3, slow3, healthy}, o).size(), 1u);
  // Slow in the newest slice only, against two healthy ones: not yet persistent.
  EXPECT_TRUE(find_cross_node_stragglers({slow3, healthy, healthy}, o).empty());
  // Slow before, healthy now: over.
  EXPECT_TRUE(find_cross_node_stragglers({healthy, slow3, slow3}, o).empty());
  // A newest slice that caught only the job's last moments (a few collectives, here looking
  // healthy) is too thin to decide; the slice before it does.
  std::vector<RankWait> sliver = healthy;
  for (RankWait& r : sliver) r.collectives = 20;
  const auto after_the_end = find_cross_node_stragglers({sliver, slow3}, o);
  ASSERT_EQ(after_the_end.size(), 1u);
  EXPECT_EQ(ranks_of(after_the_end[0].stragglers), (std::vector<int>{3}));
  EXPECT_EQ(after_the_end[0].slices_agreeing, 1);
  EXPECT_EQ(after_the_end[0].slices_with_data, 2);
  // Slices without data (the job had not started) do not count against it.
  const auto s = find_cross_node_stragglers({slow3, {}, {}}, o);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].slices_with_data, 1);
}

}  // namespace
}  // namespace eacgm
