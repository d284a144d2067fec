// `eacgm gmm fit` and `eacgm gmm score`: Gaussian mixture models on numeric CSV files, the
// library in src/analysis/ from the command line (docs/GMM.md).
#pragma once

#include <functional>

namespace CLI {
class App;
}

namespace eacgm {

// Registers the `gmm` subcommand (with `fit` and `score`) on `app`. When parsing the command line
// chose one of them, `run` is set to a function that runs it and returns the exit code: 0 on
// success, 1 when no model could be fitted, 2 on bad input (flags, CSV or model files), with a
// message on stderr that names the file and, for CSV errors, the line. It never throws.
void add_gmm_command(CLI::App& app, std::function<int()>& run);

}  // namespace eacgm
