// `eacgm merge SESSION... -o DIR`: sessions recorded on several nodes of one job become one
// session directory, every time on the clock of the first (or `reference`) session, aligned as
// merge/clock_alignment.h says. docs/MERGE.md.
//
// The merged events.sqlite holds every table of every session, each row with the `session` (its
// index on the command line) and `node` it came from, since pids of different nodes may be
// equal; instants (`start_ns`, `end_ns`, `ts_ns`) are shifted, durations are not, and ids are
// renumbered so that `collectives.call_id` still names its call. summary.json says how each
// session was aligned, the error left, and whether every collective now overlaps on every pair of
// ranks, with record's cross-rank analysis of the merged job (stragglers, and hangs across nodes
// from the collectives each node's summary lists as still open), and each layer's per-API call
// figures over every node's calls (merge/merged_layers.h); trace.perfetto-trace is one timeline
// of every node (merge/merged_trace.h).
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/result.h"

namespace eacgm {

struct MergeOptions {
  std::vector<std::string> sessions;
  std::string out_dir;
  size_t reference = 0;  // whose clock the merged session keeps
  // A collective some ranks entered and others never did, or that every rank was inside, for this
  // long before the recordings ended is a hang (record's --hang-timeout, and its default).
  double hang_timeout_s = 3.0;
};

// The merged summary (also written to out_dir/summary.json). Errors name the session or file and
// what is wrong; nothing is left in out_dir after one.
Result<nlohmann::json> merge_sessions(const MergeOptions& options);

}  // namespace eacgm
