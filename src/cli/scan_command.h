// `eacgm scan PATH... [--session DIR...] [--json] [--python PY] [--rules DIR]`: Python code that
// a framework upgrade breaks (removed, moved or changed APIs, from rule files), and with
// --session whether that code ran in recorded sessions. docs/UPGRADE.md.
#pragma once

#include <functional>

namespace CLI {
class App;
}

namespace eacgm {

// Registers `scan` on `app`; when parsing chose it, `run` runs it. Exit codes: 0 when nothing
// was found, 1 when anything was (for CI), 2 on bad input (a missing path, no interpreter, a
// corrupt rule file, a directory that is not a session), with a one-line message on stderr.
void add_scan_command(CLI::App& app, std::function<int()>& run);

}  // namespace eacgm
