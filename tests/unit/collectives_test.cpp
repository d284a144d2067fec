// Cross-rank analysis of NCCL collectives, on synthetic arrivals with known
// ground truth: a straggler is named alone, a healthy job yields nothing, a
// hang names the missing rank once its timeout has passed.
#include "layers/nccl/collectives.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "probe_row.h"
#include "test_support.h"

namespace eacgm {
namespace {

class Job {
 public:
  explicit Job(int nranks, CollectiveTracker::Options options = {}) : tracker_(options) {
    for (int r = 0; r < nranks; ++r) {
      CallRecord init;
      init.pid = pid(r);
      init.tid = pid(r);
      init.spec = &nccl_row("ncclCommInitRank");
      init.raw.args[kRdi] = 0x1000;
      init.raw.args[kRsi] = static_cast<uint64_t>(nranks);
      init.raw.args[kRdx] = static_cast<uint64_t>(r);
      init.raw.args[kStack0] = 0xfeedface;  // the unique id's first bytes
      init.raw.args[kStack1] = 0x12345678;
      init.raw.out_value = comm(r);
      tracker_.on_end(init, nullptr);
    }
  }
  static uint32_t pid(int rank) { return 1000 + rank; }
  static uint64_t comm(int rank) { return 0x5000 + rank; }  // each process has its own handle

  // Rank `rank` enters an all-reduce at `t` and leaves it at `end`.
  void enter(int rank, uint64_t t) {
    CallRecord c = collective(rank, t);
    c.finished = false;
    tracker_.on_begin(c, nullptr);
  }
  std::optional<CollectiveRef> leave(int rank, uint64_t t, uint64_t end) {
    CallRecord c = collective(rank, t);
    c.duration_ns = end - t;
    return tracker_.on_end(c, nullptr);
  }
  CollectiveTracker& tracker() { return tracker_; }

 private:
  CallRecord collective(int rank, uint64_t t) {
    CallRecord c;
    c.pid = pid(rank);
    c.tid = pid(rank);
    c.spec = &nccl_row("ncclAllReduce");
    c.start_ns = t;
    c.raw.args[kRdx] = 1 << 20;  // count
    c.raw.args[kRcx] = 7;        // ncclFloat32
    c.raw.args[kR9] = comm(rank);
    return c;
  }
  CollectiveTracker tracker_;
};

// Runs `steps` all-reduces; `delay(rank, step)` is how late each rank arrives.
template <typename Delay>
std::vector<Anomaly> run(Job& job, int nranks, int steps, Delay delay) {
  std::vector<Anomaly> found;
  uint64_t t = 1'000 * kMs;
  for (int s = 0; s < steps; ++s) {
    // Each rank's start, drawn once: its end event carries the start its begin had.
    std::vector<uint64_t> in(nranks);
    uint64_t last = 0;
    for (int r = 0; r < nranks; ++r) {
      in[r] = t + delay(r, s);
      job.enter(r, in[r]);
      last = std::max(last, in[r]);
    }
    for (int r = 0; r < nranks; ++r) job.leave(r, in[r], last + kMs);
    t = last + 20 * kMs;
    for (Anomaly& a : job.tracker().check(t)) found.push_back(std::move(a));
  }
  return found;
}

TEST(Collectives, SequenceNumbersMatchAcrossRanks) {
  Job job(2);
  job.enter(0, 10);
  job.enter(1, 12);
  auto a = job.leave(0, 10, 20);
  auto b = job.leave(1, 12, 20);
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a->comm_id, b->comm_id);
  EXPECT_EQ(a->comm_id, "00000000feedface0000000012345678");
  EXPECT_EQ(a->seq, 1u);
  EXPECT_EQ(b->seq, 1u);
  EXPECT_EQ(a->rank, 0);
  EXPECT_EQ(b->rank, 1);
  EXPECT_EQ(b->nranks, 2);
}

TEST(Collectives, StragglerIsNamedAloneWithEvidence) {
  Job job(4);
  std::mt19937 rng(1);
  auto found = run(job, 4, 40, [&](int rank, int) -> uint64_t {
    const uint64_t jitter = rng() % (200 * 1000);  // up to 0.2 ms of noise on every rank
    return jitter + (rank == 2 ? 20 * kMs : 0);
  });
  ASSERT_EQ(found.size(), 1u);
  const Anomaly& a = found[0];
  EXPECT_EQ(a.kind, "straggler");
  EXPECT_EQ(a.layer, Layer::kNccl);
  EXPECT_EQ(a.rank, 2);
  EXPECT_EQ(a.pid, Job::pid(2));
  EXPECT_GE(a.evidence["median_lateness_ns"].get<int64_t>(), 19 * static_cast<int64_t>(kMs));
  EXPECT_LE(a.evidence["collectives"].get<uint64_t>(), 12u);  // named within a dozen collectives
}

TEST(Collectives, HealthyJobYieldsNothing) {
  Job job(4);
  std::mt19937 rng(2);
  // Ranks jitter by up to 3 ms; one happens to be a little later on average.
  auto found = run(job, 4, 500, [&](int rank, int) -> uint64_t {
    return rng() % (3 * kMs) + (rank == 3 ? 200 * 1000 : 0);
  });
  EXPECT_TRUE(found.empty()) << found[0].message;
}

TEST(Collectives, ARankLateOnlyAfterEacgmPausedItIsNoStraggler) {
  // Rank 2 loads a library before each of its first 30 collectives and waits 20 ms for eacgm
  // to probe it; then it runs as fast as the others. Without the pauses noted, the same
  // arrivals make it a straggler (the control).
  for (bool noted : {true, false}) {
    Job job(4);
    std::vector<Anomaly> found;
    uint64_t t = 1'000 * kMs;
    for (int s = 0; s < 60; ++s) {
      const bool stopped = s < 30;
      if (stopped && noted) job.tracker().note_pause(Job::pid(2), t - 5 * kMs, t + 15 * kMs);
      uint64_t at[4], last = 0;
      for (int r = 0; r < 4; ++r) {
        at[r] = t + (r == 2 && stopped ? 20 * kMs : r * 100'000);
        job.enter(r, at[r]);
        last = std::max(last, at[r]);
      }
      for (int r = 0; r < 4; ++r) job.leave(r, at[r], last + kMs);
      t = last + 20 * kMs;
      for (Anomaly& a : job.tracker().check(t)) found.push_back(std::move(a));
    }
    if (noted) {
      EXPECT_TRUE(found.empty()) << found[0].message;
      for (const auto& rank : job.tracker().rank_figures()) {
        EXPECT_EQ(rank["not_judged_after_eacgm_paused"], 30);  // every rank of those 30
      }
    } else {
      ASSERT_EQ(found.size(), 1u);
      EXPECT_EQ(found[0].rank, 2);
    }
  }
}

TEST(Collectives, HangNamesTheMissingRankAfterTheTimeout) {
  CollectiveTracker::Options options;
  options.hang_timeout_ns = 5'000 * kMs;
  Job job(3, options);
  run(job, 3, 5, [](int, int) -> uint64_t { return 0; });
  const uint64_t t = 10'000 * kMs;
  job.enter(0, t);
  job.enter(2, t + kMs);
  EXPECT_TRUE(job.tracker().check(t + 4'900 * kMs).empty());
  auto found = job.tracker().check(t + 5'000 * kMs);
  ASSERT_EQ(found.size(), 1u);
  const Anomaly& a = found[0];
  EXPECT_EQ(a.kind, "hang");
  EXPECT_EQ(a.rank, 1);
  EXPECT_EQ(a.pid, Job::pid(1));
  EXPECT_EQ(a.evidence["missing_ranks"], nlohmann::json({1}));
  EXPECT_EQ(a.evidence["waiting_ranks"], nlohmann::json({0, 2}));
  EXPECT_EQ(a.evidence["waiting_pids"], nlohmann::json({Job::pid(0), Job::pid(2)}));
  EXPECT_EQ(a.evidence["seq"], 6);
  EXPECT_EQ(a.evidence["last_completed"]["1"]["seq"], 5);
  EXPECT_TRUE(job.tracker().check(t + 9'000 * kMs).empty());  // reported once
}

TEST(Collectives, AHangThatMovesOnIsResolvedAndALaterOneIsNamedAgain) {
  // Rank 1 misses all-reduce #6 for 8 s (a checkpoint written on one rank):
  // a hang at 5 s, then resolved when it arrives. The communicator's next
  // hang, #8 blocked inside the collective, is reported too.
  CollectiveTracker::Options options;
  options.hang_timeout_ns = 5'000 * kMs;
  Job job(3, options);
  run(job, 3, 5, [](int, int) -> uint64_t { return 0; });
  uint64_t t = 10'000 * kMs;
  job.enter(0, t);
  job.enter(2, t);
  ASSERT_EQ(job.tracker().check(t + 5'000 * kMs).size(), 1u);
  EXPECT_TRUE(job.tracker().take_resolutions().empty());
  job.enter(1, t + 8'000 * kMs);
  const std::vector<CollectiveTracker::HangResolution> resolved = job.tracker().take_resolutions();
  ASSERT_EQ(resolved.size(), 1u);
  EXPECT_EQ(resolved[0].seq, 6u);
  EXPECT_DOUBLE_EQ(resolved[0].waited_s, 8.0);
  EXPECT_TRUE(job.tracker().take_resolutions().empty());  // taken once
  for (int r = 0; r < 3; ++r) job.leave(r, r == 1 ? t + 8'000 * kMs : t, t + 8'001 * kMs);
  t += 8'000 * kMs;
  t += 10 * kMs;
  for (int r = 0; r < 3; ++r) job.enter(r, t);  // #7 completes
  for (int r = 0; r < 3; ++r) job.leave(r, t, t + kMs);
  t += 10 * kMs;
  for (int r = 0; r < 3; ++r) job.enter(r, t);  // #8 never returns
  EXPECT_TRUE(job.tracker().check(t + 4'000 * kMs).empty());
  auto found = job.tracker().check(t + 5'000 * kMs);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].evidence["seq"], 8);
  EXPECT_EQ(found[0].evidence["inside_collective"], true);
  EXPECT_TRUE(job.tracker().take_resolutions().empty());
}

TEST(Collectives, HangInsideACollectiveEveryRankEnteredIsNamed) {
  // A transport that stopped: every rank enters all-reduce #6 and none returns.
  CollectiveTracker::Options options;
  options.hang_timeout_ns = 5'000 * kMs;
  Job job(3, options);
  run(job, 3, 5, [](int, int) -> uint64_t { return 0; });
  const uint64_t t = 10'000 * kMs;
  for (int r = 0; r < 3; ++r) job.enter(r, t + r * kMs);
  EXPECT_TRUE(job.tracker().check(t + 4'900 * kMs).empty());
  auto found = job.tracker().check(t + 5'100 * kMs);
  ASSERT_EQ(found.size(), 1u);
  const Anomaly& a = found[0];
  EXPECT_EQ(a.kind, "hang");
  EXPECT_EQ(a.evidence["seq"], 6);
  EXPECT_EQ(a.evidence["inside_collective"], true);
  EXPECT_EQ(a.evidence["waiting_ranks"], nlohmann::json({0, 1, 2}));
  EXPECT_EQ(a.evidence["waiting_pids"], nlohmann::json({Job::pid(0), Job::pid(1), Job::pid(2)}));
  EXPECT_EQ(a.evidence["missing_ranks"], nlohmann::json::array());
  EXPECT_NE(a.message.find("none has returned"), std::string::npos);
  EXPECT_TRUE(job.tracker().check(t + 9'000 * kMs).empty());  // reported once
}

TEST(Collectives, ASlowCollectiveThatReturnsIsNoHang) {
  CollectiveTracker::Options options;
  options.hang_timeout_ns = 5'000 * kMs;
  Job job(2, options);
  run(job, 2, 5, [](int, int) -> uint64_t { return 0; });
  const uint64_t t = 10'000 * kMs;
  for (int r = 0; r < 2; ++r) job.enter(r, t);
  job.leave(0, t, t + 4'000 * kMs);  // one rank came back before the timeout
  EXPECT_TRUE(job.tracker().check(t + 6'000 * kMs).empty());
}

// A job attached mid-run: no ncclCommInitRank is seen; ranks come from the
// environment, and each rank's probes arrive at a different point of its
// progress (`first_step[r]`: the first all-reduce whose entry rank r is seen
// making; one it was already inside at attach is seen neither entering nor
// leaving).
class AttachedJob {
 public:
  AttachedJob(std::vector<int> first_step, CollectiveTracker::Options options = {})
      : tracker_(options) {
    restart(std::move(first_step), Job::pid(0));
  }
  // Another job, with other processes, seen by the same tracker.
  void restart(std::vector<int> first_step, uint32_t first_pid) {
    first_step_ = std::move(first_step);
    procs_.assign(first_step_.size(), ProcessInfo{});
    for (size_t r = 0; r < procs_.size(); ++r) {
      procs_[r].pid = first_pid + static_cast<uint32_t>(r);
      procs_[r].rank = static_cast<int>(r);
      procs_[r].world_size = static_cast<int>(procs_.size());
    }
  }
  uint32_t pid(int rank) const { return procs_[rank].pid; }
  int nranks() const { return static_cast<int>(procs_.size()); }
  void enter(int rank, int step, uint64_t t) {
    if (step < first_step_[rank]) return;
    CallRecord c = call(rank, step, t);
    c.finished = false;
    tracker_.on_begin(c, &procs_[rank]);
  }
  std::optional<CollectiveRef> leave(int rank, int step, uint64_t t, uint64_t end) {
    if (step < first_step_[rank]) return std::nullopt;
    CallRecord c = call(rank, step, t);
    c.duration_ns = end - t;
    return tracker_.on_end(c, &procs_[rank]);
  }
  CollectiveTracker& tracker() { return tracker_; }

 private:
  CallRecord call(int rank, int step, uint64_t t) const {
    CallRecord c;
    c.pid = pid(rank);
    c.tid = c.pid;
    // As the kernel counts the thread's collectives: from 1 at the first it was traced making.
    c.announced = static_cast<uint32_t>(step - first_step_[rank] + 1);
    c.spec = &nccl_row("ncclAllReduce");
    c.start_ns = t;
    c.raw.args[kRdx] = 1024;
    c.raw.args[kRcx] = 7;
    c.raw.args[kR9] = 0x77;  // a communicator handle never seen created
    return c;
  }
  std::vector<int> first_step_;
  CollectiveTracker tracker_;
  std::vector<ProcessInfo> procs_;
};

// Runs `steps` all-reduces on an attached job; every rank leaves together,
// 1 ms after the last arrival. Returns the anomalies and, per step, the
// sequence numbers the ranks' completions got.
template <typename Delay>
std::pair<std::vector<Anomaly>, std::vector<std::vector<std::optional<uint64_t>>>> run_attached(
    AttachedJob& job, int steps, Delay delay) {
  std::vector<Anomaly> found;
  std::vector<std::vector<std::optional<uint64_t>>> seqs(steps);
  uint64_t t = 1'000 * kMs;
  for (int s = 0; s < steps; ++s) {
    std::vector<uint64_t> in(job.nranks());  // drawn once, as in run()
    uint64_t last = 0;
    for (int r = 0; r < job.nranks(); ++r) {
      in[r] = t + delay(r, s);
      job.enter(r, s, in[r]);
      last = std::max(last, in[r]);
    }
    for (int r = 0; r < job.nranks(); ++r) {
      auto ref = job.leave(r, s, in[r], last + kMs);
      seqs[s].push_back(ref ? std::optional<uint64_t>(ref->seq) : std::nullopt);
      if (ref) {
        EXPECT_EQ(ref->comm_id, "world");
      }
    }
    t = last + 20 * kMs;
    for (Anomaly& a : job.tracker().check(t)) found.push_back(std::move(a));
  }
  return {found, seqs};
}

TEST(Collectives, AttachAlignsRanksOnTheirCollectiveEnds) {
  // Ranks 1 and 3 were inside the first all-reduce when the probes arrived.
  AttachedJob job({0, 1, 0, 1});
  auto [found, seqs] = run_attached(job, 40, [](int, int) -> uint64_t { return 0; });
  EXPECT_TRUE(found.empty());
  // Step 1 is the first every rank is seen finishing: sequence 1. Step 0,
  // seen by half the ranks only, is never numbered; completions are numbered
  // once the alignment is known (a window of collectives later), and from
  // then on on every rank.
  EXPECT_EQ(seqs[0], (std::vector<std::optional<uint64_t>>(4, std::nullopt)));
  int aligned = -1;
  for (int s = 1; s < 40; ++s) {
    for (const auto& seq : seqs[s]) {
      if (seq) {
        EXPECT_EQ(*seq, static_cast<uint64_t>(s)) << "step " << s;
      }
    }
    if (aligned < 0 && std::ranges::all_of(seqs[s], [](const auto& q) { return q.has_value(); })) {
      aligned = s;
    }
  }
  ASSERT_GT(aligned, 0);
  EXPECT_LE(aligned, 20);
  for (int s = aligned; s < 40; ++s) {
    EXPECT_EQ(seqs[s], (std::vector<std::optional<uint64_t>>(4, static_cast<uint64_t>(s))))
        << "step " << s;
  }
}

TEST(Collectives, AttachAlignsBackToBackCollectivesWhoseEndsInterleave) {
  // Collectives 0.3 ms apart; at each one, one rank in turn is descheduled
  // after the barrier and leaves 0.28 ms late. Rank 1, seen first at step 1,
  // is the late one there, so the end nearest to its first seen end on rank
  // 0 is rank 0's step 2, not step 1: the nearest end alone would misnumber
  // every collective of rank 0. The overlap of the calls may not.
  AttachedJob job({0, 1, 1, 0});
  std::mt19937 rng(5);
  uint64_t t = 1'000 * kMs;
  for (int s = 0; s < 60; ++s) {
    std::vector<uint64_t> in(4);
    uint64_t last = 0;
    for (int r = 0; r < 4; ++r) {
      in[r] = t + rng() % 50'000;
      last = std::max(last, in[r]);
      job.enter(r, s, in[r]);
    }
    for (int r = 0; r < 4; ++r) {
      const uint64_t out = last + (r == s % 4 ? 280'000 : 10'000);
      auto ref = job.leave(r, s, in[r], out);
      if (ref) {
        EXPECT_EQ(ref->seq, static_cast<uint64_t>(s)) << "rank " << r << " step " << s;
      }
    }
    t = last + 300'000;
  }
}

TEST(Collectives, AttachNumbersStayAlignedWhenARanksEventsAreLost) {
  // A full ring buffer loses events: rank 1's end at step 100, rank 2's begin at step 120, both
  // of rank 3's events at step 140 (only the kernel's count of the thread's collectives says it
  // happened). Counting each rank's events would number every later collective of those ranks
  // one off, so calls of different collectives would be taken for one and judged for lateness.
  AttachedJob job({0, 0, 0, 0});
  const auto lost = [](int rank, int step, bool begin) {
    return (rank == 1 && step == 100 && !begin) || (rank == 2 && step == 120 && begin) ||
           (rank == 3 && step == 140);
  };
  std::mt19937 rng(11);
  std::vector<Anomaly> found;
  uint64_t t = 1'000 * kMs;
  int numbered = 0;
  for (int s = 0; s < 300; ++s) {
    std::vector<uint64_t> in(4);
    uint64_t last = 0;
    for (int r = 0; r < 4; ++r) {
      in[r] = t + rng() % 200'000;
      last = std::max(last, in[r]);
      if (!lost(r, s, true)) job.enter(r, s, in[r]);
    }
    for (int r = 0; r < 4; ++r) {
      if (lost(r, s, false)) continue;
      const auto ref = job.leave(r, s, in[r], last + kMs);
      if (!ref) continue;
      EXPECT_EQ(ref->seq, static_cast<uint64_t>(s + 1)) << "rank " << r << " step " << s;
      if (s > 100) ++numbered;
    }
    t = last + 5 * kMs;
    for (Anomaly& a : job.tracker().check(t)) found.push_back(std::move(a));
  }
  EXPECT_GE(numbered, 4 * 199 - 2);  // every end after step 100 that was not lost
  EXPECT_TRUE(found.empty()) << found[0].message;
  // Rank 2's arrival at step 120 was taken from its end, which carries the start: the
  // collective was judged with all four ranks, like every other.
  std::map<int, uint64_t> judged;  // collectives per rank
  for (const nlohmann::json& rank : job.tracker().rank_figures()) {
    judged[rank["rank"].get<int>()] = rank["collectives"].get<uint64_t>();
  }
  ASSERT_EQ(judged.size(), 4u);
  // Step 140's collective waits for rank 3 (until the hang timeout lets it go) and is judged on
  // none; every other collective is judged on all four, step 120's too.
  for (int r = 1; r < 4; ++r) EXPECT_EQ(judged[r], judged[0]) << "rank " << r;
  EXPECT_GE(judged[0], 300u - 20u - 1u);  // all but the few before the alignment
}

TEST(Collectives, ALostEndShiftsNoLaterNumberOfACommunicatorSeenCreated) {
  // Numbered from ncclCommInitRank: the end of rank 0's third all-reduce is lost, and its
  // fourth must still be number 4, on both ranks.
  Job job(2);
  uint64_t t = 1'000 * kMs;
  for (uint64_t step = 1; step <= 6; ++step) {
    job.enter(0, t);
    job.enter(1, t + 10);
    const auto a = step == 3 ? std::nullopt : job.leave(0, t, t + kMs);
    const auto b = job.leave(1, t + 10, t + kMs);
    if (step != 3) {
      ASSERT_TRUE(a);
      EXPECT_EQ(a->seq, step);
    }
    ASSERT_TRUE(b);
    EXPECT_EQ(b->seq, step);
    t += 5 * kMs;
  }
}

TEST(Collectives, StragglerIsNamedAfterAttach) {
  AttachedJob job({1, 0, 2, 0});
  std::mt19937 rng(3);
  auto [found, seqs] = run_attached(job, 40, [&](int rank, int) -> uint64_t {
    return rng() % (200 * 1000) + (rank == 2 ? 20 * kMs : 0);
  });
  ASSERT_EQ(found.size(), 1u) << found[1].message;
  EXPECT_EQ(found[0].kind, "straggler");
  EXPECT_EQ(found[0].rank, 2);
  EXPECT_EQ(found[0].pid, Job::pid(2));
  EXPECT_EQ(found[0].evidence["communicator"], "world");
}

TEST(Collectives, HealthyJobAfterAttachYieldsNothing) {
  AttachedJob job({0, 1, 1, 0});
  std::mt19937 rng(4);
  auto [found, seqs] = run_attached(job, 300, [&](int rank, int) -> uint64_t {
    return rng() % (3 * kMs) + (rank == 3 ? 200'000 : 0);
  });
  EXPECT_TRUE(found.empty()) << found[0].message;
}

TEST(Collectives, HangAfterAttachNamesTheMissingRank) {
  CollectiveTracker::Options options;
  options.hang_timeout_ns = 5'000 * kMs;
  AttachedJob job({0, 1, 0}, options);
  run_attached(job, 25, [](int, int) -> uint64_t { return 0; });
  const uint64_t t = 10'000 * kMs;
  job.enter(0, 25, t);
  job.enter(2, 25, t + kMs);
  auto found = job.tracker().check(t + 5'000 * kMs);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].kind, "hang");
  EXPECT_EQ(found[0].rank, 1);
  EXPECT_EQ(found[0].evidence["seq"], 25);  // step s is sequence s
  EXPECT_EQ(found[0].evidence["last_completed"]["1"]["seq"], 24);
}

TEST(Collectives, NoVerdictBeforeEveryRankIsAligned) {
  // Rank 1 is never seen finishing a collective (it was stuck before we
  // attached): nothing can be aligned, so nothing is judged.
  AttachedJob job({0, 1000});
  auto [found, seqs] =
      run_attached(job, 40, [](int rank, int) -> uint64_t { return rank == 0 ? 30 * kMs : 0; });
  EXPECT_TRUE(found.empty());
  for (const auto& step : seqs) EXPECT_EQ(step[0], std::nullopt);
}

TEST(Collectives, BytesAndBusBandwidthPerRank) {
  Job job(2);
  job.enter(0, 0);
  job.enter(1, 0);
  job.leave(0, 0, 1'000'000);  // 4 MiB in 1 ms
  job.leave(1, 0, 1'000'000);
  const nlohmann::json ranks = job.tracker().rank_figures();
  ASSERT_EQ(ranks.size(), 2u);
  // all-reduce bus factor 2(n-1)/n = 1 for two ranks: 4 MiB per ms.
  EXPECT_NEAR(ranks[0]["bus_bandwidth_gbps"].get<double>(), 4.194304, 1e-9);
  EXPECT_EQ(ranks[0]["collectives"], 1);
}

// Runs `collectives` all-reduces, entries only (the verdicts need no more),
// checking every 1,000th; `delay(rank, step)` is how late each rank arrives.
template <typename Delay>
std::vector<Anomaly> arrivals(Job& job, int nranks, uint64_t from, uint64_t collectives,
                              Delay delay, uint64_t& t) {
  std::vector<Anomaly> found;
  for (uint64_t s = from; s < from + collectives; ++s) {
    uint64_t last = 0;
    for (int r = 0; r < nranks; ++r) {
      job.enter(r, t + delay(r, s));
      last = std::max(last, t + delay(r, s));
    }
    t = last + 20 * kMs;
    if (s % 1000 == 999) {
      for (Anomaly& a : job.tracker().check(t)) found.push_back(std::move(a));
    }
  }
  return found;
}

TEST(Collectives, MemoryIsBoundedOverAMillionCollectivesAndALateStragglerIsNamed) {
  // A job that runs for days under serve: healthy for 700,000 all-reduces,
  // then rank 2 starts arriving 20 ms late. Each rank keeps its last 1,024
  // collectives, so the rank's present state is judged, not its whole past
  // (over all 1,000,000, rank 2 was last in under half: never a straggler).
  CollectiveTracker::Options options;
  options.straggler_window = 1024;
  Job job(4, options);
  std::mt19937 rng(6);
  uint64_t t = 1'000 * kMs;
  const auto jitter = [&](int, uint64_t) -> uint64_t { return rng() % (3 * kMs); };
  std::vector<Anomaly> found = arrivals(job, 4, 0, 700'000, jitter, t);
  EXPECT_TRUE(found.empty()) << found[0].message;
  const uint64_t slow_from_ns = t;
  found = arrivals(
      job, 4, 700'000, 300'000,
      [&](int rank, uint64_t s) -> uint64_t {
        return jitter(rank, s) + (rank == 2 ? 20 * kMs : 0);
      },
      t);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].kind, "straggler");
  EXPECT_EQ(found[0].rank, 2);
  EXPECT_GE(found[0].evidence["median_lateness_ns"].get<int64_t>(), 19 * static_cast<int64_t>(kMs));
  // Judged on a recent window, not the whole session.
  EXPECT_LE(found[0].evidence["collectives"].get<uint64_t>(), 1024u);
  EXPECT_GT(found[0].evidence["collectives_seen"].get<uint64_t>(), 700'000u);
  // Since when: within two windows of the change (healthy ranks are sometimes
  // last by 1 ms too), not the first such collective of the job, hours before.
  EXPECT_GE(found[0].t_s * 1e9, static_cast<double>(slow_from_ns - 2 * 1024 * 25 * kMs));

  const CollectiveTracker::Footprint f = job.tracker().footprint();
  EXPECT_EQ(f.lateness_samples, 4u * 1024);  // not 4,000,000
  EXPECT_EQ(f.pending, 0u);
  EXPECT_EQ(f.ranks, 4u);
  // The figures still count every collective; the mean is over all of them.
  const nlohmann::json ranks = job.tracker().rank_figures();
  EXPECT_EQ(ranks[2]["collectives"], 1'000'000);
  EXPECT_GE(ranks[2]["median_lateness_ns"].get<int64_t>(), 19 * static_cast<int64_t>(kMs));
  EXPECT_GT(ranks[2]["mean_lateness_ns"].get<int64_t>(), 5 * static_cast<int64_t>(kMs));
  EXPECT_LT(ranks[2]["mean_lateness_ns"].get<int64_t>(), 7 * static_cast<int64_t>(kMs));
}

TEST(Collectives, ARankThatTurnsSlowLateIsNamedWithinAFewHundredCollectives) {
  // The default window (65,536, as in record): 60,000 healthy all-reduces,
  // then rank 1 arrives 5 ms late. Judged on the whole window it would take
  // another ~60,000 collectives to be last in half of them; the recent
  // windows see it at once. Checked every 100 collectives, as ticks would.
  Job job(4, CollectiveTracker::Options{});
  std::mt19937 rng(11);
  uint64_t t = 1'000 * kMs;
  const auto jitter = [&](int, uint64_t) -> uint64_t { return rng() % (200 * 1000); };
  std::vector<Anomaly> found;
  const auto play = [&](uint64_t from, uint64_t count, auto delay) {
    for (uint64_t s = from; s < from + count && found.empty(); ++s) {
      uint64_t last = 0;
      for (int r = 0; r < 4; ++r) {
        job.enter(r, t + delay(r, s));
        last = std::max(last, t + delay(r, s));
      }
      t = last + 2 * kMs;
      if (s % 100 == 99) found = job.tracker().check(t);
      if (!found.empty()) return s;
    }
    return from + count;
  };
  play(0, 60'000, jitter);
  ASSERT_TRUE(found.empty()) << found[0].message;
  const uint64_t onset_ns = t;
  const uint64_t named_at = play(60'000, 5'000, [&](int rank, uint64_t s) -> uint64_t {
    return jitter(rank, s) + (rank == 1 ? 5 * kMs : 0);
  });
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].kind, "straggler");
  EXPECT_EQ(found[0].rank, 1);
  EXPECT_LT(named_at - 60'000, 400u);  // the 256-collective window: half of it, checked per 100
  EXPECT_EQ(found[0].evidence["collectives"], 256);
  // Since when: the first late arrival, not the session's start (0 here).
  EXPECT_GE(found[0].t_s * 1e9, static_cast<double>(onset_ns));
  EXPECT_LE(found[0].t_s * 1e9, static_cast<double>(onset_ns + 10 * kMs));
}

TEST(Collectives, FiguresOfASessionWithinTheWindowAreExact) {
  // Rank 1 is 1, 2, ... 100 us late in turn; the median rank never is.
  // Exact median and mean, whether the window is larger or just large enough.
  for (size_t window : {size_t{65536}, size_t{100}}) {
    CollectiveTracker::Options options;
    options.straggler_window = window;
    Job job(3, options);
    uint64_t t = 1'000 * kMs;
    arrivals(
        job, 3, 0, 100,
        [](int rank, uint64_t s) -> uint64_t { return rank == 1 ? (s + 1) * 1000 : 0; }, t);
    const nlohmann::json ranks = job.tracker().rank_figures();
    ASSERT_EQ(ranks.size(), 3u);
    EXPECT_EQ(ranks[1]["collectives"], 100);
    EXPECT_EQ(ranks[1]["arrived_last"], 100);
    EXPECT_EQ(ranks[1]["median_lateness_ns"], 50'000) << "window " << window;  // lower median
    EXPECT_EQ(ranks[1]["mean_lateness_ns"], 50'500) << "window " << window;
    EXPECT_EQ(ranks[0]["median_lateness_ns"], 0);
    EXPECT_EQ(job.tracker().footprint().lateness_samples, 300u);
  }
}

TEST(Collectives, WaitingCollectivesAreBoundedWhenARankIsNeverSeen) {
  // Rank 2 of three is not traced (outside serve's cgroup): no collective
  // ever completes. The hang is reported once; the oldest waiting ones go.
  CollectiveTracker::Options options;
  options.max_pending_per_comm = 1024;
  Job job(3, options);
  uint64_t t = 1'000 * kMs;
  std::vector<Anomaly> found;
  for (int s = 0; s < 100'000; ++s) {
    job.enter(0, t);
    job.enter(1, t + kMs);
    t += 20 * kMs;
    if (s % 100 == 99) {
      for (Anomaly& a : job.tracker().check(t)) found.push_back(std::move(a));
    }
    ASSERT_LE(job.tracker().footprint().pending, 1024u);
  }
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].kind, "hang");
  EXPECT_EQ(found[0].rank, 2);
  EXPECT_EQ(found[0].evidence["seq"], 1);  // the first one, found before it was given up on
}

TEST(Collectives, ForgettingExitedProcessesReleasesTheirCommunicators) {
  Job job(4);
  std::mt19937 rng(7);
  run(job, 4, 50, [&](int, int) -> uint64_t { return rng() % kMs; });
  job.enter(0, 10'000 * kMs);  // a collective only ranks 0 and 1 entered before the job died
  job.enter(1, 10'000 * kMs);
  CollectiveTracker::Footprint f = job.tracker().footprint();
  EXPECT_EQ(f.communicators, 4u);
  EXPECT_EQ(f.ranks, 4u);
  EXPECT_EQ(f.pending, 1u);
  EXPECT_EQ(f.lateness_samples, 4u * 50);

  job.tracker().forget_process(Job::pid(0));
  f = job.tracker().footprint();
  EXPECT_EQ(f.communicators, 3u);
  EXPECT_EQ(f.ranks, 3u);
  EXPECT_EQ(f.pending, 1u);  // rank 1 still waits in it
  job.tracker().forget_process(Job::pid(1));
  EXPECT_EQ(job.tracker().footprint().pending, 0u);  // nobody alive waits for it
  job.tracker().forget_process(Job::pid(2));
  job.tracker().forget_process(Job::pid(3));
  f = job.tracker().footprint();
  EXPECT_EQ(f.communicators, 0u);
  EXPECT_EQ(f.ranks, 0u);
  EXPECT_EQ(f.lateness_samples, 0u);
  EXPECT_EQ(f.in_flight, 0u);
  EXPECT_TRUE(job.tracker().rank_figures().empty());
  EXPECT_TRUE(job.tracker().check(100'000 * kMs).empty());  // no hang for the dead
}

TEST(Collectives, TheNextJobAfterAttachIsAlignedAfresh) {
  // serve sees one job of the assumed world communicator end, then another
  // start with ranks at other points of their progress. Aligned on the first
  // job's offsets, the second's collectives would be misnumbered.
  AttachedJob job({0, 1, 0, 1});
  std::mt19937 rng(8);
  auto first = run_attached(job, 40, [&](int rank, int) -> uint64_t {
    return rng() % (200 * 1000) + (rank == 1 ? 20 * kMs : 0);
  });
  ASSERT_EQ(first.first.size(), 1u);
  EXPECT_EQ(first.first[0].rank, 1);
  for (int r = 0; r < 4; ++r) job.tracker().forget_process(job.pid(r));
  EXPECT_EQ(job.tracker().footprint().world_ranks, 0u);
  EXPECT_EQ(job.tracker().footprint().communicators, 0u);

  job.restart({1, 0, 2, 0}, 2000);
  auto [found, seqs] = run_attached(job, 60, [&](int rank, int) -> uint64_t {
    return rng() % (200 * 1000) + (rank == 2 ? 20 * kMs : 0);
  });
  // Step 2 is the first every rank of the new job is seen finishing: sequence 1.
  for (int s = 25; s < 60; ++s) {
    EXPECT_EQ(seqs[s], (std::vector<std::optional<uint64_t>>(4, static_cast<uint64_t>(s - 1))))
        << "step " << s;
  }
  // The first job's straggler was its own: the new one is named too.
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].kind, "straggler");
  EXPECT_EQ(found[0].rank, 2);
  EXPECT_EQ(found[0].pid, 2002u);
}

TEST(NcclTable, BytesForEveryDatatype) {
  const ProbeSpec& spec = nccl_row("ncclAllReduce");
  const uint64_t sizes[] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};
  for (uint64_t dtype = 0; dtype < 12; ++dtype) {
    RawCall raw;
    raw.args[kRdx] = 1000;
    raw.args[kRcx] = dtype;
    EXPECT_EQ(call_bytes(spec, raw), 1000 * sizes[dtype]) << nccl_type_name(dtype);
  }
  EXPECT_EQ(nccl_type_name(9), "ncclBfloat16");
  EXPECT_EQ(status_name(Layer::kNccl, 2), "ncclSystemError");
}

}  // namespace
}  // namespace eacgm

namespace eacgm {
namespace {

// Collectives read back already numbered (eacgm merge) get the verdicts live calls get: the rank
// 3 ms late at each of 40 all-reduces is the straggler, and its figures count every collective.
TEST(Collectives, ReplayedCollectivesGetTheSameVerdicts) {
  CollectiveTracker tracker(CollectiveTracker::Options{});
  const std::string comm = "00112233445566778899aabbccddeeff";
  for (uint64_t seq = 1; seq <= 40; ++seq) {
    const uint64_t t = seq * 10'000'000;
    for (int rank = 0; rank < 4; ++rank) {
      const uint64_t arrive =
          t + static_cast<uint64_t>(rank) * 20'000 + (rank == 2 ? 3'000'000 : 0);
      tracker.replay_begin({comm, seq, rank, 4}, 100 + rank, "ncclAllReduce", arrive);
    }
    for (int rank = 0; rank < 4; ++rank) {
      tracker.replay_end({comm, seq, rank, 4}, 100 + rank, "ncclAllReduce", t + 4'000'000,
                         1'000'000, 1 << 20, false);
    }
  }
  const std::vector<Anomaly> found = tracker.check(41 * 10'000'000);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].kind, "straggler");
  EXPECT_EQ(found[0].rank, 2);
  EXPECT_EQ(found[0].pid, 102u);
  const nlohmann::json figures = tracker.rank_figures();
  ASSERT_EQ(figures.size(), 4u);
  EXPECT_EQ(figures[2]["collectives"], 40);
  EXPECT_EQ(figures[2]["arrived_last"], 40);
  EXPECT_EQ(figures[0]["arrived_last"], 0);
}

// One node of a job that spans two: this tracker sees ranks 0 and 1 of 4; ranks 2 and 3 run (and
// are traced) elsewhere. Collectives its ranks return from are not waiting for anyone, however
// long the job runs; one they enter and never return from is a hang naming the ranks not here.
TEST(Collectives, RanksTracedOnAnotherNodeAreNotMissing) {
  CollectiveTracker::Options options;
  options.hang_timeout_ns = 3'000'000'000;
  CollectiveTracker tracker(options);
  const std::string comm = "0123456789abcdef0123456789abcdef";
  constexpr uint64_t kStep = 10'000'000;
  for (uint64_t seq = 1; seq <= 1000; ++seq) {
    for (int rank = 0; rank < 2; ++rank) {
      tracker.replay_begin({comm, seq, rank, 4}, 100 + rank, "ncclAllReduce", seq * kStep + rank);
    }
    for (int rank = 0; rank < 2; ++rank) {
      tracker.replay_end({comm, seq, rank, 4}, 100 + rank, "ncclAllReduce", seq * kStep + 5000,
                         4000, 64, false);
    }
    EXPECT_TRUE(tracker.check(seq * kStep + 6000).empty()) << seq;
  }
  // Ten seconds of collectives that returned: none waits for anyone, none is kept past the
  // timeout, and none is open.
  EXPECT_LE(tracker.footprint().pending, 301u);
  EXPECT_TRUE(tracker.open_collectives().empty());
  // Ranks 0 and 1 enter #1001; 2 and 3 never do (on the other node).
  tracker.replay_begin({comm, 1001, 0, 4}, 100, "ncclAllReduce", 1001 * kStep);
  tracker.replay_begin({comm, 1001, 1, 4}, 101, "ncclAllReduce", 1001 * kStep + 1);
  EXPECT_TRUE(tracker.check(1001 * kStep + 2'000'000'000).empty());
  const std::vector<Anomaly> hang = tracker.check(1001 * kStep + 3'000'000'000);
  ASSERT_EQ(hang.size(), 1u);
  EXPECT_EQ(hang[0].kind, "hang");
  EXPECT_EQ(hang[0].evidence["seq"], 1001);
  EXPECT_EQ(hang[0].evidence["missing_ranks"], nlohmann::json({2, 3}));
  EXPECT_EQ(tracker.open_collectives().size(), 2u);
}

// What summary.json lists as still open when a recording ends: the ranks waiting in a collective
// others never entered, and every rank inside one none returned from; not the assumed world
// communicator, whose numbers mean nothing to another session.
TEST(Collectives, OpenCollectivesAreTheEntriesWithoutAReturn) {
  CollectiveTracker tracker(CollectiveTracker::Options{});
  const std::string a = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", b = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";
  for (int rank = 0; rank < 4; ++rank) {
    tracker.replay_begin({a, 1, rank, 4}, 100 + rank, "ncclAllReduce", 1000 + rank);
    tracker.replay_end({a, 1, rank, 4}, 100 + rank, "ncclAllReduce", 5000, 4000, 64, false);
  }
  // Ranks 0 and 1 wait in #2 for ranks 2 and 3, which never come.
  tracker.replay_begin({a, 2, 0, 4}, 100, "ncclAllReduce", 9000);
  tracker.replay_begin({a, 2, 1, 4}, 101, "ncclAllReduce", 9500);
  // Both ranks of b are inside #7, the last since 20000.
  tracker.replay_begin({b, 7, 0, 2}, 100, "ncclBroadcast", 19000);
  tracker.replay_begin({b, 7, 1, 2}, 101, "ncclBroadcast", 20000);
  tracker.replay_begin({std::string(kAssumedWorldComm), 3, 0, 2}, 100, "ncclAllReduce", 30000);

  const nlohmann::json open = tracker.open_collectives();
  ASSERT_EQ(open.size(), 4u) << open.dump();
  EXPECT_EQ(open[0], (nlohmann::json{{"communicator", a},
                                     {"seq", 2},
                                     {"collective", "ncclAllReduce"},
                                     {"rank", 0},
                                     {"nranks", 4},
                                     {"pid", 100},
                                     {"entered_ns", 9000}}));
  EXPECT_EQ(open[1]["rank"], 1);
  EXPECT_EQ(open[1]["entered_ns"], 9500);
  EXPECT_EQ(open[2]["communicator"], b);
  EXPECT_EQ(open[2]["seq"], 7);
  EXPECT_EQ(open[2]["entered_ns"], 20000);  // all inside since the last one entered
  EXPECT_EQ(open[3]["rank"], 1);
  EXPECT_EQ(open[3]["nranks"], 2);

  // Replayed into a tracker that also saw ranks 2 and 3 stop after #1 (another node), the wait
  // is a hang naming them.
  CollectiveTracker::Options options;
  options.hang_timeout_ns = 3'000'000'000;
  CollectiveTracker merged(options);
  for (int rank = 0; rank < 4; ++rank) {
    merged.replay_begin({a, 1, rank, 4}, 100 + rank, "ncclAllReduce", 1000 + rank);
    merged.replay_end({a, 1, rank, 4}, 100 + rank, "ncclAllReduce", 5000, 4000, 64, false);
  }
  for (const nlohmann::json& e : open) {
    if (e["communicator"] != a) continue;
    merged.replay_begin({a, e["seq"].get<uint64_t>(), e["rank"].get<int>(), e["nranks"].get<int>()},
                        e["pid"].get<uint32_t>(), "ncclAllReduce", e["entered_ns"].get<uint64_t>());
  }
  EXPECT_TRUE(merged.check(9000 + 2'000'000'000).empty());  // not yet for long enough
  const std::vector<Anomaly> hang = merged.check(9000 + 3'000'000'000);
  ASSERT_EQ(hang.size(), 1u);
  EXPECT_EQ(hang[0].kind, "hang");
  EXPECT_EQ(hang[0].rank, 2);
  EXPECT_EQ(hang[0].pid, 102u);
  EXPECT_EQ(hang[0].evidence["missing_ranks"], nlohmann::json({2, 3}));
  EXPECT_EQ(hang[0].evidence["last_completed"]["2"]["seq"], 1);
}

}  // namespace
}  // namespace eacgm
