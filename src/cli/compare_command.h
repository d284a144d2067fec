// `eacgm compare BASE CANDIDATE [--json]` and `eacgm compare BASE... -- CANDIDATE...`: what
// changed between recorded runs of one job. docs/COMPARE.md.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace eacgm {

// Registers `compare` on `app`; when parsing chose it, `run` runs it. main() takes everything
// after the first "--" off the command line before parsing (it is a job's argv for `record`):
// `after_separator` and `separator` are those words and whether there was a "--", read when
// `run` runs. Exit codes: 0 no regression, 1 at least one (for CI), 2 bad input (a missing
// directory, not a session, a corrupt database, a session without calls, an ambiguous set form),
// with a one-line message on stderr.
void add_compare_command(CLI::App& app, std::function<int()>& run,
                         const std::vector<std::string>& after_separator, const bool& separator);

}  // namespace eacgm
