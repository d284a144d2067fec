#include "layers/os/os_doctor.h"

#include <unistd.h>

namespace eacgm {

std::vector<DoctorCheck> os_doctor(const DoctorContext& context) {
  // No library: tracepoints by BTF (signals, OOM kills) and syscall tracepoints through tracefs
  // (mmap, munmap, mremap, ioctl).
  const bool syscalls =
      access("/sys/kernel/tracing/events/syscalls/sys_enter_mmap", F_OK) == 0 ||
      access("/sys/kernel/debug/tracing/events/syscalls/sys_enter_mmap", F_OK) == 0;
  const char* detail = !context.kernel_btf ? "needs kernel BTF (signal_generate, mark_victim)"
                       : syscalls
                           ? "ready: signals, OOM kills, mmap/munmap, ioctl on --ioctl-devices"
                       : context.tracefs_mounted
                           ? "signals and OOM kills only: no syscall tracepoints in this kernel"
                           : "ready (eacgm mounts tracefs for the syscall tracepoints)";
  return {{.name = "os", .ok = context.kernel_btf, .detail = detail, .found = {}}};
}

}  // namespace eacgm
