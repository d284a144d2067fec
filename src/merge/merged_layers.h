// The `layers` of a merged summary.json (`eacgm merge`, docs/MERGE.md): per layer, whether it was
// active on any node and on which, and its per-API call figures over every node's calls, computed
// from the merged database exactly as a single session's summary computes them from its own calls
// (Session::add_call, sinks/summary.cpp): percentiles of different nodes do not add up, so they are
// taken over the merged `calls` table, one API at a time.
#pragma once

#include <sqlite3.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/result.h"

namespace eacgm {

// One merged session, in command-line order: its node's name and its summary.json's `layers`
// (null when its recorder left no summary).
struct MergedNodeLayers {
  std::string node;
  nlohmann::json layers;
};

// `{layer: {status, [reason], nodes, calls|ops: {api: figures}, [inner_calls]}}` from `db`, the
// merged database (its `calls` rows carry their `session`, an index into `nodes`).
// - `status` is "active" when a node's summary says so or a node has calls of the layer in the
//   database (a crashed recorder leaves calls but no summary); otherwise the first node's that
//   lists the layer, with its `reason`.
// - `nodes`: the nodes on which the layer was active, in command-line order.
// - The call table (`calls`, `ops` for torch) of a layer with calls: per API `count`, `errors`,
//   `total_ns`, `p50_ns`, `p99_ns` (nearest rank, session/percentile.h), `bytes`,
//   `errors_by_code` when some failed, and for torch `self_ns`; a driver call made inside a
//   runtime call (`inner_call` 1) is not counted there but in `inner_calls` (name -> count).
//   Failed calls count in `count`, `errors`, `total_ns` and the percentiles, and move no bytes.
// - Figures a single session has beside its call table (os, gpu, the python layer's sampled
//   `functions`, nccl's ranks) are not combined: os, gpu and python have no call table here.
// Reads one API's durations at a time.
Result<nlohmann::json> merged_layers(sqlite3* db, const std::vector<MergedNodeLayers>& nodes);

}  // namespace eacgm
