#include "layers/os/os_report.h"

#include <fmt/format.h>

#include "common/human_text.h"
#include "layers/os/os_events.h"

namespace eacgm {

// The os layer's lines: signals, OOM kills, MAP_POPULATE, large mappings, ioctls.
std::vector<std::string> os_report_lines(const Session& s, const LayerState&) {
  std::vector<std::string> lines;
  const auto line = [&lines](std::string text) { lines.push_back(std::move(text)); };
  const OsActivity& os = s.os;
  auto who = [&s](uint32_t pid) {
    const ProcessInfo* p = s.find_process(pid);
    return p && !p->comm.empty() ? fmt::format("pid {} ({})", pid, p->comm)
                                 : fmt::format("pid {}", pid);
  };
  auto since = [&s](uint64_t ns) { return ns > s.start_ns ? (ns - s.start_ns) / 1e9 : 0.0; };
  line(fmt::format("\n[os] {} signals, {} OOM kills, mmap of {} processes, ioctls on {}",
                   os.signals.size(), os.oom_kills.size(), os.mmap.size(),
                   os.ioctl_pattern.empty() ? "-" : os.ioctl_pattern));
  for (const SignalEvent& e : os.signals) {
    line(fmt::format("  {:>7.2f} s  {} to {}{}", since(e.ts_ns), signal_name(e.sig), who(e.pid),
                     e.sent_by_process()
                         ? fmt::format(" from pid {} ({})", e.sender_pid, e.sender_comm)
                         : " from the kernel"));
  }
  for (const OomKillEvent& e : os.oom_kills) {
    line(fmt::format("  {:>7.2f} s  OOM kill of {}: anon-rss {}, total-vm {}, cgroup {}",
                     since(e.ts_ns), who(e.pid), human_bytes(e.anon_rss_bytes),
                     human_bytes(e.total_vm_bytes), e.cgroup));
  }
  for (const auto& [pid, st] : os.mmap) {
    std::string text = fmt::format("  mmap {}: {} mmap, {} munmap, {} mapped", who(pid), st.mmaps,
                                   st.munmaps, human_bytes(st.bytes_mapped));
    if (st.populate.count > 0) {
      text += fmt::format("; MAP_POPULATE {} ({}), peak {}/s", st.populate.count,
                          human_bytes(st.populate.bytes), st.populate.peak_per_s);
    }
    if (!st.large_anonymous.empty()) {
      uint64_t bytes = 0;
      for (const auto& [addr, m] : st.large_anonymous) bytes += m.len;
      text += fmt::format("; {} large anonymous mappings never unmapped ({}{})",
                          st.large_anonymous.size(), human_bytes(bytes),
                          st.exited ? ", until exit" : "");
    }
    line(text);
  }
  for (const auto& [pid, by_dev] : os.ioctl) {
    for (const auto& [rdev, st] : by_dev) {
      auto dev = os.devices.find(rdev);
      line(fmt::format("  ioctl {} on {}: {} calls, {} errors, mean {}, max {}, {} over {}",
                       who(pid), dev != os.devices.end() ? dev->second : device_number(rdev),
                       st.count, st.errors, human_ns(st.count ? st.total_ns / st.count : 0),
                       human_ns(st.max_ns), st.slow, human_ns(os.slow_ioctl_ns)));
    }
  }
  return lines;
}

}  // namespace eacgm
