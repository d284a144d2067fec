// The Python half of `eacgm scan`: a small script, held here as a string and run by the job's
// own interpreter (`python3 -I -S -c SCRIPT ROOT...`, no file installed, no shell), reads the
// files named on its stdin, parses them with Python's `ast` module (every version's grammar,
// exactly), resolves imports and aliases and prints one JSON line per use of a name below the
// given roots. It runs on Python 3.8 to 3.13. docs/UPGRADE.md says what it follows and what not.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "upgrade/scan.h"

namespace eacgm::upgrade {

// The script's source.
std::string_view python_extractor_source();

// The interpreter to run: `name` itself when it holds a '/', else the first executable of that
// name on PATH. Errors are one line a user can act on.
Result<std::string> find_python(const std::string& name);

struct Extraction {
  std::vector<Use> uses;
  std::vector<ScanWarning> warnings;  // files that could not be read or parsed
  size_t files_parsed = 0;
  std::string python_version;  // the interpreter's, "3.11.7"
};

// Runs the script with `python` over `files` (paths as the user gave them; they come back in
// Use::file), reporting names below `roots`. Fails when the interpreter cannot run the script
// (not Python 3.8 or newer, killed, garbled output).
Result<Extraction> run_python_extractor(const std::string& python,
                                        const std::vector<std::string>& files,
                                        const std::vector<std::string>& roots);

// One line of the script's output folded into `out` (exposed for tests). Errors say what is
// wrong with the line; `files` maps the script's file indexes back to paths.
Result<void> read_extractor_line(std::string_view line, const std::vector<std::string>& files,
                                 Extraction& out, bool& done);

}  // namespace eacgm::upgrade
