// `eacgm slo fit SESSION... -o slo.json`, `eacgm slo check slo.json SESSION... [--json]` and
// `eacgm slo rules slo.json [-o rules.yml]`: baselines learned from healthy runs, the rollout gate
// that holds new runs to them, and the same objectives as Prometheus alerting rules. docs/SLO.md.
#pragma once

#include <functional>

namespace CLI {
class App;
}

namespace eacgm {

// Registers `slo` and its three commands on `app`; when parsing chose one, `run` runs it. Exit
// codes: 0 done (check: every objective holds in every session), 1 check found a violation,
// 2 bad input (a missing or corrupt SLO file or session, an SLO file of another version, an
// unwritable output), with a one-line message on stderr.
void add_slo_command(CLI::App& app, std::function<int()>& run);

}  // namespace eacgm
