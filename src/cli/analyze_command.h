// `eacgm analyze SESSION` (offline anomaly detection on a recorded session: the live detectors
// replayed, with a baseline from the session's own warm-up or from a model) and
// `eacgm model fit SESSION... -o M` (baselines learned from healthy runs). docs/ANALYSIS.md.
#pragma once

#include <functional>

namespace CLI {
class App;
}

namespace eacgm {

// Registers `analyze` and `model` (with `fit`) on `app`. When parsing chose one, `run` is set to a
// function that runs it and returns the exit code: 0 on success (anomalies found or not), 1 when
// no baseline could be learned, 2 on bad input (missing or corrupt session, unusable model), with
// a message on stderr. It never throws.
void add_analyze_commands(CLI::App& app, std::function<int()>& run);

}  // namespace eacgm
