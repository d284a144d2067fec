// Cross-rank analysis of NCCL collectives: which rank arrives last, and
// persistently (a straggler), and which collective some ranks entered while
// others never did (a hang) — named while the job still runs.
//
// Communicators are matched across processes by the first 16 bytes of their
// ncclUniqueId (captured at ncclCommInitRank); every collective on a
// communicator gets the next sequence number on each rank, so collective n of
// rank 0 is collective n of rank 3.
//
// After `attach`, communicators already exist: the one world communicator is
// assumed from RANK and WORLD_SIZE, and each rank's collectives are numbered
// from wherever it was when the probes arrived. Ranks are aligned on the one
// exact fact there is: no rank leaves a collective before every rank has
// entered it, so the calls of one collective on any two ranks overlap in
// time. Each rank's offset against the rank seen last to finish its first
// collective is the one under which a window of consecutive collectives all
// overlap. Arrivals wait in a buffer until that alignment is known.
//
// Memory is bounded for `eacgm serve`, which runs for days: each rank keeps
// its most recent `straggler_window` collectives (the straggler test is
// judged on them), at most `max_pending_per_comm` collectives wait for their
// ranks on one communicator, and forget_process() releases what was kept
// about a process once it has exited.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "session/session.h"

namespace eacgm {

// The id of a communicator created before eacgm attached, assumed from RANK and WORLD_SIZE; its
// ranks are aligned on time (above).
inline constexpr std::string_view kAssumedWorldComm = "world";

class CollectiveTracker {
 public:
  struct Options {
    uint64_t hang_timeout_ns = 5'000'000'000;
    // A straggler is last in at least this share of collectives...
    double straggler_min_share = 0.5;
    // ...over at least this many collectives...
    uint64_t straggler_min_collectives = 10;
    // ...with a binomial tail probability (if arrival order were random) below this...
    double straggler_max_p = 1e-4;
    // ...and a median lateness of at least this many ns and this multiple of
    // the other ranks' typical lateness.
    uint64_t straggler_min_lateness_ns = 1'000'000;
    double straggler_min_ratio = 4.0;
    // The share, the binomial test and both medians are taken over each
    // rank's most recent this many collectives: the state a rank is in now,
    // in memory that does not grow with the job's age. Sessions shorter than
    // this are judged on every collective, as if there were no window.
    size_t straggler_window = 65536;
    // Within it, the most recent this many collectives, four times as many,
    // and so on, are judged too: a rank that turned slow a second ago
    // dominates the last few hundred collectives long before it dominates an
    // hour of them.
    size_t straggler_min_window = 256;
    // Collectives that some ranks entered and others not yet, per
    // communicator. More happens only when a rank is not traced (outside
    // serve's cgroup) or gone: the oldest is given up on, after its hang
    // was reported.
    size_t max_pending_per_comm = 4096;
  };

  explicit CollectiveTracker(Options options) : options_(options) {}

  // A collective call's start (from its entry event): its arrival. Returns
  // the collective's identity, if its communicator is known.
  std::optional<CollectiveRef> on_begin(const CallRecord& call, const ProcessInfo* process);
  // A finished NCCL call: communicator creation and destruction, completions.
  // Returns the identity of a finished collective.
  std::optional<CollectiveRef> on_end(const CallRecord& call, const ProcessInfo* process);
  // A collective numbered already, read back from recorded sessions (eacgm merge): a rank's
  // arrival at it, and its return. Fed in time order, they get the verdicts live calls get.
  void replay_begin(const CollectiveRef& ref, uint32_t pid, std::string_view name,
                    uint64_t start_ns);
  void replay_end(const CollectiveRef& ref, uint32_t pid, std::string_view name, uint64_t end_ns,
                  uint64_t duration_ns, uint64_t bytes, bool failed);
  // New anomalies as of `now_ns` (hangs past the timeout, stragglers once
  // the evidence is clear). Each is reported once.
  std::vector<Anomaly> check(uint64_t now_ns);
  // A hang reported earlier whose collective moved after all: the missing
  // rank arrived, or the collective returned. Then it was a stall of that
  // length (a checkpoint, a slow rank), and a later hang on the
  // communicator is reported anew.
  struct HangResolution {
    std::string communicator;
    uint64_t seq = 0;
    double waited_s = 0;
  };
  std::vector<HangResolution> take_resolutions() { return std::exchange(resolutions_, {}); }
  // Per-rank figures for summary.json: layers.nccl.ranks.
  nlohmann::json rank_figures() const;
  // The collectives ranks have entered and not returned from, as of now (waiting for other ranks,
  // or all inside and none out), for summary.json layers.nccl.open_collectives: the database
  // holds only calls that returned, and `eacgm merge` replays these so that a hang across nodes
  // (one node's ranks inside a collective another node's never entered) is judged on the whole
  // job. Numbered communicators only: the assumed world's numbers differ from session to session.
  // Each: communicator, seq, collective, rank, nranks, pid, entered_ns (the node's clock).
  nlohmann::json open_collectives() const;

  // Seconds are counted from here in anomalies.
  void set_session_start(uint64_t start_ns) { session_start_ns_ = start_ns; }

  // Releases a process that has exited: its communicator handles, its
  // ranks' figures, its arrivals at collectives still waiting (a collective
  // nobody alive waits for goes), and the assumed world communicator once
  // no rank of it is left, so that the next job is aligned afresh.
  void forget_process(uint32_t pid);

  // eacgm itself stopped `pid` from `from_ns` to `to_ns` (a library load, an unwind): a rank that
  // arrives late after such a stop was late for eacgm, so no collective it was paused before is
  // judged for lateness.
  void note_pause(uint32_t pid, uint64_t from_ns, uint64_t to_ns);

  // What is kept, for tests of the bounds.
  struct Footprint {
    size_t communicators = 0;     // (pid, handle) pairs
    size_t ranks = 0;             // (communicator, rank) figures
    size_t lateness_samples = 0;  // over every rank
    size_t pending = 0;           // collectives waiting for ranks
    size_t world_ranks = 0;       // the assumed world communicator's ranks
    size_t in_flight = 0;         // communicators with a collective all ranks are inside
  };
  Footprint footprint() const;

 private:
  struct Comm {
    std::string id;
    int rank = -1;
    int nranks = 0;
    uint64_t next_seq = 0;
    bool assumed = false;  // the world communicator, assumed after attach
  };
  // One rank of the assumed world communicator until the ranks are aligned.
  struct WorldRank {
    uint32_t pid = 0;
    int nranks = 0;
    struct Span {
      uint64_t local = 0;  // the collective's number on this rank (call_number)
      uint64_t start_ns = 0;
      uint64_t end_ns = 0;
    };
    std::vector<Span> ends;  // this rank's first seen finished collectives, in order
    struct Begin {
      uint64_t local = 0;  // 1 for the first collective seen entering on this rank
      uint64_t ts_ns = 0;
      std::string name;
    };
    std::vector<Begin> begins;
    std::optional<int64_t> offset;  // seq = local + offset, once aligned
  };
  struct Arrival {
    uint64_t ts_ns = 0;
    uint32_t pid = 0;
  };
  struct Pending {
    std::string name;
    int nranks = 0;
    std::map<int, Arrival> arrivals;  // by rank
    uint64_t first_ns = 0;
  };
  // A rank's most recent collectives, oldest overwritten first.
  struct Recent {
    std::vector<int64_t> lateness_ns;  // arrival minus the median arrival
    std::vector<uint64_t> arrival_ns;  // when this rank arrived
    std::vector<bool> was_last;        // whether this rank arrived last
    size_t next = 0;                   // the oldest, once full
    uint64_t last = 0;                 // how many of them it was last in
    void add(int64_t lateness, uint64_t ts_ns, bool last_in, size_t capacity);
    size_t size() const { return lateness_ns.size(); }
    // Where the k-th most recent collective is kept (k = 0: the newest).
    size_t back(size_t k) const { return (next + size() - 1 - k) % size(); }
    // The most recent n lateness values (n <= size()).
    std::vector<int64_t> latest_lateness(size_t n, bool absolute) const;
  };
  struct RankStats {
    uint32_t pid = 0;
    std::string comm_id;
    uint64_t collectives = 0;    // matched across all ranks
    uint64_t last = 0;           // times this rank arrived last
    Recent recent;               // the straggler test's evidence
    double lateness_sum_ns = 0;  // over every collective judged, for the mean
    uint64_t paused = 0;         // collectives not judged: eacgm paused a rank before them
    uint64_t arrived_ns = 0;     // this rank's latest arrival
    uint64_t bus_bytes = 0;      // bytes weighted by the algorithm's bus factor
    uint64_t busy_ns = 0;        // time inside collectives
    std::optional<std::pair<uint64_t, std::string>> last_completed;  // seq, name
  };
  using CommKey = std::pair<uint32_t, uint64_t>;  // pid, communicator handle
  using PendingMap = std::map<std::pair<std::string, uint64_t>, Pending>;  // (comm id, seq)

  Comm* comm_of(const CallRecord& call, const ProcessInfo* process);
  // Where a calling thread is in its collectives. A collective is numbered once, at whichever
  // of its two events comes first, and the other takes that number: a lost end shifts no later
  // number. The kernel counts each thread's collectives (CallRecord::announced), so collectives
  // of which both events were lost are counted from the gap, on the one communicator the thread
  // uses; a thread on several leaves the gap unattributed (numbers may then drift, and the
  // assumed world's overlap check is what remains).
  struct ThreadCursor {
    uint32_t announced = 0;              // of the latest call seen
    CommKey comm;                        // the latest call's communicator
    bool one_comm = true;                // every call seen was on `comm`
    std::optional<uint64_t> open_local;  // the latest call's number, until its end is seen
    uint64_t open_start_ns = 0;          // and its start, which its end carries too
  };
  // The call's number among its communicator's collectives on this rank, counting from 1 at the
  // first seen; `*at_begin` says whether its begin event was numbered before (an end only).
  uint64_t call_number(const CallRecord& call, const CommKey& key, Comm& comm, bool* at_begin);
  // A rank entered its collective number `local` (from its begin event, or from its end when the
  // begin was lost): its arrival, unless the assumed world is not aligned yet.
  std::optional<CollectiveRef> enter(const CallRecord& call, const Comm& comm, uint64_t local);
  void arrive(const std::string& comm_id, int rank, int nranks, uint64_t seq, uint64_t ts_ns,
              uint32_t pid, std::string_view name);
  void align_world();
  // A rank returned from collective `ref.seq`: it moved.
  void complete(const CollectiveRef& ref, uint32_t pid, std::string_view name, uint64_t end_ns,
                uint64_t duration_ns, uint64_t bytes, bool failed);
  void settle(const std::string& comm_id, uint64_t seq, Pending& pending);
  PendingMap::iterator erase_pending(PendingMap::iterator it);  // keeps the count per comm
  // Per communicator, the highest sequence number any rank has returned from.
  std::map<std::string, uint64_t> newest_completed() const;
  std::optional<Anomaly> straggler_in(const std::string& comm_id);
  // The straggler test on the most recent `n` collectives of one rank.
  std::optional<Anomaly> straggler_over(const std::string& comm_id, int rank,
                                        const RankStats& stats, size_t n, int nranks);

  Options options_;
  uint64_t session_start_ns_ = 0;
  std::map<CommKey, Comm> comms_;
  std::map<std::pair<uint32_t, uint32_t>, ThreadCursor> threads_;  // by (pid, tid)
  PendingMap pending_;
  std::map<std::string, size_t> pending_per_comm_;          // entries of pending_, by comm id
  std::map<std::pair<std::string, int>, RankStats> ranks_;  // (comm id, rank)
  // The hang reported on a communicator and not resolved yet.
  struct OpenHang {
    uint64_t seq = 0;
    uint64_t since_ns = 0;
  };
  std::map<std::string, OpenHang> hang_reported_;  // by comm id
  std::vector<HangResolution> resolutions_;
  void resolve_hang(const std::string& comm_id, uint64_t seq, uint64_t now_ns);
  // Per communicator, the newest collective every rank has entered and none has finished yet:
  // a hang inside it (a transport stuck, a GPU that stopped) has no missing rank to name.
  struct InFlight {
    uint64_t seq = 0;
    std::string name;
    uint64_t all_in_ns = 0;        // when the last rank entered
    std::map<int, uint32_t> pids;  // rank -> pid
  };
  std::map<std::string, InFlight> in_flight_;
  std::set<std::string> straggler_reported_;  // comm ids
  // eacgm's recent stops of each process, (from, to), oldest first; a few suffice, since only
  // those since a rank's previous arrival count.
  static constexpr size_t kPausesKept = 16;
  std::map<uint32_t, std::deque<std::pair<uint64_t, uint64_t>>> pauses_;
  bool paused_between(uint32_t pid, uint64_t after_ns, uint64_t before_ns) const;
  std::map<int, WorldRank> world_;  // by rank; emptied once aligned
  bool world_aligned_ = false;
};

}  // namespace eacgm
