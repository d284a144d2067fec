// `eacgm serve`'s command line (the agent itself: agent/serve_session.h).
#pragma once

#include <functional>

namespace CLI {
class App;
}

namespace eacgm {

// Registers `serve` on `app`; when parsing chose it, `run` runs it.
void add_serve_command(CLI::App& app, std::function<int()>& run);

}  // namespace eacgm
