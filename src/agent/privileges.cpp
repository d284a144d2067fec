#include "agent/privileges.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <string>

namespace eacgm {
namespace {

// Capability numbers from linux/capability.h.
struct Capability {
  int bit;
  const char* name;
  const char* why;
};
constexpr Capability kNeeded[] = {
    {39, "CAP_BPF", "load BPF programs"},
    {38, "CAP_PERFMON", "attach uprobes and tracepoints"},
    {19, "CAP_SYS_PTRACE", "read other processes' maps and environment"},
    {5, "CAP_KILL", "pause a target while probing a library it just loaded"},
};

uint64_t effective_capabilities() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.starts_with("CapEff:")) return std::stoull(line.substr(7), nullptr, 16);
  }
  return 0;
}

}  // namespace

Privileges current_privileges() {
  Privileges p;
  p.root = geteuid() == 0;
  const uint64_t caps = effective_capabilities();
  for (const Capability& c : kNeeded) {
    if (!(caps & (uint64_t{1} << c.bit))) p.missing.push_back(c.name);
  }
  // root without the capabilities (a restricted container) is not enough.
  if (p.root && !p.missing.empty()) p.root = false;
  return p;
}

std::string Privileges::explain() const {
  if (sufficient()) return root ? "running as root" : "all needed capabilities are present";
  return fmt::format(
      "eacgm needs root (or the capabilities CAP_BPF, CAP_PERFMON, CAP_SYS_PTRACE and CAP_KILL); "
      "missing: {}. Run it with sudo, or grant them with "
      "`setcap cap_bpf,cap_perfmon,cap_sys_ptrace,cap_kill+ep eacgm`",
      fmt::join(missing, ", "));
}

}  // namespace eacgm
