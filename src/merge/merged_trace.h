// The merged session's Perfetto timeline (trace.perfetto-trace), written from the merged
// database by the same writer as a recording's: one track per thread under its process, each
// process named with its node, collectives linked across every node's ranks by flows.
#pragma once

#include <sqlite3.h>

#include <string>

#include "common/result.h"

namespace eacgm {

// `db` is the merged events.sqlite (session_merge.h); `realtime_offset_ns` the reference's.
// A pid seen on two nodes is shown as pid + 4194304 x (session + 1) (4194304 is Linux's largest
// pid_max), so that their processes never share a track.
Result<void> write_merged_trace(sqlite3* db, const std::string& path, int64_t realtime_offset_ns);

}  // namespace eacgm
