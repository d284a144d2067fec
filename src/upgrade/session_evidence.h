// What a recorded eacgm session says about which code ran, for `eacgm scan --session`: the
// Python functions the python layer saw (summary.json `layers.python.functions`, events.sqlite
// `python_functions`), the Python lines behind traced calls (`calls.py_file`, `py_line`,
// `py_function`) and the torch operators that ran (summary.json `layers.torch.ops`, `calls` of
// layer torch). docs/SQLITE_SCHEMA.md describes the tables.
#pragma once

#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/result.h"
#include "upgrade/scan.h"

namespace eacgm::upgrade {

class SessionEvidence {
 public:
  // Errors say what is wrong with `dir`: missing, not a session (neither summary.json nor
  // events.sqlite), a summary that is not JSON, a database that is not eacgm's.
  static Result<SessionEvidence> load(const std::string& dir);

  // A function as the python layer keys it: `path/below/its/root.py:qualname` (or `co_name`),
  // with the interpreter's co_filename and co_firstlineno when known (else empty and 0).
  void add_function(const std::string& key, const std::string& file = {}, int first_line = 0);
  // A line that was executing when a traced call began.
  void add_line(const std::string& file, int line);
  void add_torch_op(const std::string& op);

  // Whether the finding's code ran: its enclosing function (same file, same qualname or same
  // first line), its exact line, or, for a rule with aten operators, one of those operators.
  // `absolute_file` is the finding's file, absolute and without symbolic links.
  bool ran(const Finding& finding, const std::string& absolute_file) const;

  size_t functions() const { return functions_.size(); }
  size_t torch_ops() const { return torch_ops_.size(); }

 private:
  struct Function {
    std::string path;  // the key's path part
    std::string name;  // the key's qualname part
    std::string file;  // co_filename, or empty
    int first_line = 0;
  };
  std::vector<Function> functions_;
  std::unordered_map<int, std::vector<std::string>> lines_;  // line -> files
  std::set<std::string> torch_ops_;
};

// Whether `recorded` (a path a session recorded: absolute, or relative to some root) names the
// file at `absolute` (absolute, normalized): equal when absolute, else a whole-component tail.
bool same_source_file(const std::string& absolute, const std::string& recorded);

}  // namespace eacgm::upgrade
