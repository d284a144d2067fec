// What one probe hit costs the traced process on this machine, measured by eacgm itself.
//
// A traced call pays the kernel's breakpoint trap on entry and the return trampoline on return,
// plus eacgm's program each time; the program's share the kernel counts (BPF run-time stats),
// the traps it does not. So eacgm times a function of its own binary, untraced and with an
// empty program on its entry and return (uprobe_multi), and takes the difference per hit. The
// figure depends on the CPU, the kernel and its mitigations, not on the job: it is measured once
// per boot and kept in /run/eacgm (a tmpfs, emptied at boot), keyed by the boot id.
#pragma once

#include <optional>
#include <string>

#include "common/result.h"

namespace eacgm {

struct TrapCost {
  double ns_per_hit = 0;  // one entry or one return: half of a traced call's pair
  bool cached = false;    // read from the cache rather than measured now
};

// The cost on this boot: from the cache, else measured (about 0.1 s) and cached. Error on a
// kernel without uprobe_multi links or without the privileges to load a program.
Result<TrapCost> trap_cost_per_hit();

// The cache file's line for `boot_id`, or nullopt when it is for another boot or unreadable.
std::optional<double> parse_trap_cache(const std::string& text, const std::string& boot_id);
std::string format_trap_cache(const std::string& boot_id, double ns_per_hit);

}  // namespace eacgm
