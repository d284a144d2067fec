#include "layers/torch/unwind_stop.h"

#include <fmt/format.h>
#include <sys/uio.h>

#include <cerrno>
#include <cstring>
#include <set>
#include <vector>

namespace eacgm {

Result<size_t> restore_return_addresses(uint32_t pid,
                                        std::span<const std::pair<uint64_t, uint64_t>> slots) {
  // The kernel may still list a record for a frame that was abandoned at the same slot as a
  // live one; the newest comes first and is the one that holds.
  std::set<uint64_t> seen;
  std::vector<uint64_t> values;
  values.reserve(slots.size());  // never reallocated: `local` points into it
  std::vector<iovec> local, remote;
  for (auto [slot, orig] : slots) {
    if (!seen.insert(slot).second) continue;
    values.push_back(orig);
    local.push_back({&values.back(), sizeof(uint64_t)});
    remote.push_back({reinterpret_cast<void*>(slot), sizeof(uint64_t)});
  }
  if (local.empty()) return size_t{0};
  const ssize_t n = process_vm_writev(static_cast<pid_t>(pid), local.data(), local.size(),
                                      remote.data(), remote.size(), 0);
  if (n < 0) {
    return Error{fmt::format(
        "cannot put back the return addresses of process {} before it unwinds ({}); a C++ "
        "exception crossing a traced torch operator may end it (--layers without torch "
        "avoids that)",
        pid, std::strerror(errno))};
  }
  const size_t written = static_cast<size_t>(n) / sizeof(uint64_t);
  if (written < local.size()) {
    return Error{fmt::format(
        "put back only {} of the {} return addresses of process {} before it unwinds; a C++ "
        "exception crossing a traced torch operator may end it",
        written, local.size(), pid)};
  }
  return written;
}

}  // namespace eacgm
