// `eacgm merge SESSION... -o DIR [--reference N] [--json]`: sessions recorded on several nodes of
// one job become one, on one clock. docs/MERGE.md.
#pragma once

#include <functional>

namespace CLI {
class App;
}

namespace eacgm {

// Registers `merge` on `app`; when parsing chose it, `run` runs it. Exit codes: 0 merged, and
// every collective seen by two sessions overlaps on every pair of ranks; 1 merged, but some do
// not (the clocks could not be aligned: drift, or sessions of different jobs); 2 bad input (fewer
// than two sessions, a missing or corrupt session, an output directory that is not empty), with a
// one-line message on stderr and nothing written.
void add_merge_command(CLI::App& app, std::function<int()>& run);

}  // namespace eacgm
