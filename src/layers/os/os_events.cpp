#include "layers/os/os_events.h"

#include <fmt/format.h>
#include <string.h>

namespace eacgm {

std::string signal_name(int sig) {
  // sigabbrev_np knows the names of this libc; real-time signals have none.
  if (const char* abbrev = sigabbrev_np(sig)) return fmt::format("SIG{}", abbrev);
  return fmt::format("SIG{}", sig);
}

std::string device_number(uint32_t rdev) {
  return fmt::format("{}:{}", rdev >> 20, rdev & ((1u << 20) - 1));
}

}  // namespace eacgm
