// `eacgm cluster --prometheus URL`: the fleet's view, from the Prometheus that
// scrapes every node's `eacgm serve`: which rank (on which node) straggles,
// which ranks hang, which processes leak device memory.
#pragma once

#include <functional>

namespace CLI {
class App;
}

namespace eacgm {

// Registers `cluster` on `app`; when parsing chose it, `run` runs it. Exit
// codes: 0 (whether or not anomalies were found), 1 when Prometheus cannot be
// reached or refuses a query, 2 on bad input.
void add_cluster_command(CLI::App& app, std::function<int()>& run);

}  // namespace eacgm
