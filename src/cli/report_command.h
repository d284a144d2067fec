// `eacgm report SESSION [-o FILE]`: one recorded session as one self-contained HTML page
// (src/report/session_report.h, docs/REPORT.md).
#pragma once

#include <functional>

namespace CLI {
class App;
}

namespace eacgm {

// Registers `report` on `app`; when parsing chose it, `run` runs it. Exit codes: 0 written; 2 bad
// input (not a session, an unreadable database, an output that cannot be written), with a
// one-line message on stderr and no file left behind.
void add_report_command(CLI::App& app, std::function<int()>& run);

}  // namespace eacgm
