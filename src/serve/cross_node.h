// Verdicts across nodes: the hung or straggling rank of a job whose ranks run on several
// machines, each traced by its own `eacgm serve`, judged from what they export to Prometheus
// (eacgm_nccl_rank_*; docs/SERVE.md). Each node knows only its own ranks; here they meet.
//
// Nothing compares two nodes' clocks. A hang is judged on sequence numbers (every node numbers
// a communicator's collectives alike, from its creation) and on durations each node measured
// itself: when nothing moved on a communicator for the timeout, the ranks behind the others are
// the ones the others wait for. A straggler is judged on how long each rank waits inside a
// collective on average: the rank everyone waits for arrives last and waits least, by a margin
// as large as its delay, whatever the clocks say.
//
// Pure functions of the series, so that every rule is tested without a Prometheus.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace eacgm {

// One rank of one communicator, as one node exports it now.
struct RankReport {
  std::string node;  // the Prometheus `instance` that exported it
  std::string job_id;
  std::string comm;  // communicator id; "world" when assumed from RANK/WORLD_SIZE
  int rank = -1;
  uint32_t pid = 0;
  int nranks = 0;
  std::optional<uint64_t> entered_seq;  // absent while the node cannot number the collectives
  std::optional<uint64_t> completed_seq;
  double inside_s = 0;        // inside its current collective for this long (0: in none)
  double progress_age_s = 0;  // since it last entered or left one
};

// One rank's mean time inside a collective over one slice of time.
struct RankWait {
  std::string node;
  std::string job_id;
  std::string comm;
  int rank = -1;
  uint32_t pid = 0;
  double collectives = 0;  // finished in the slice
  double mean_s = 0;       // time inside per collective
};

struct CrossNodeOptions {
  // A communicator on which nothing moved for this long is hung (when some rank waits).
  double hang_timeout_s = 60;
  // A straggler waits at least this much less per collective than the others...
  double straggler_min_gap_s = 0.002;
  // ...a gap this many times wider than the spread within either group...
  double straggler_gap_to_spread = 4;
  // ...judged only on ranks with at least this many collectives in a slice...
  double straggler_min_collectives = 20;
  // ...in the newest slice with a quarter of the fullest slice's collectives or more, and in
  // slices holding more than half of the collectives judged.
};

struct CrossNodeHang {
  std::string job_id;
  std::string comm;
  int nranks = 0;
  // "missing": some ranks never entered the collective the others wait in (`culprits`);
  // "untraced": ranks no node reports (`untraced_ranks`), while the reported ones wait;
  // "stuck": every rank entered it and none returned.
  std::string kind;
  std::optional<uint64_t> seq;  // the collective waited in, when numbered
  double waited_s = 0;          // how long nothing has moved on the communicator
  std::vector<RankReport> culprits;
  std::vector<int> untraced_ranks;
  std::vector<RankReport> waiting;  // the ranks that wait (for "stuck": every rank)
  // Every rank of `node` is a culprit and the node holds no other rank of the communicator:
  // the node is the likely cause (its network, its data, its host).
  std::optional<std::string> whole_node;
};

struct CrossNodeStraggler {
  std::string job_id;
  std::string comm;
  std::vector<RankWait> stragglers;  // from the newest slice with data
  std::optional<std::string> whole_node;
  double straggler_mean_s = 0;  // the stragglers' highest mean wait
  double others_mean_s = 0;     // the others' lowest
  int slices_agreeing = 0;
  int slices_with_data = 0;
};

// Hangs among the ranks reported now, one verdict per hung communicator.
std::vector<CrossNodeHang> find_cross_node_hangs(const std::vector<RankReport>& ranks,
                                                 const CrossNodeOptions& options);

// Stragglers, from each rank's mean wait over consecutive slices of time, newest first.
std::vector<CrossNodeStraggler> find_cross_node_stragglers(
    const std::vector<std::vector<RankWait>>& slices, const CrossNodeOptions& options);

// One line each, for the terminal.
std::string describe(const CrossNodeHang& hang);
std::string describe(const CrossNodeStraggler& straggler);

}  // namespace eacgm
