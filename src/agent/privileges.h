// What the running user may do: eacgm needs root or a handful of
// capabilities to load BPF programs and inspect other processes.
#pragma once

#include <string>
#include <vector>

namespace eacgm {

struct Privileges {
  bool root = false;
  std::vector<std::string> missing;  // capabilities we need but do not have
  bool sufficient() const { return root || missing.empty(); }
  // One sentence for an error message or doctor's report.
  std::string explain() const;
};

Privileges current_privileges();

}  // namespace eacgm
