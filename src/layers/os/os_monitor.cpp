#include "layers/os/os_monitor.h"

#include <fmt/format.h>
#include <signal.h>
#include <string.h>

#include <algorithm>
#include <bit>
#include <cmath>

#include "common/human_text.h"

namespace eacgm {
namespace {

using nlohmann::json;

std::string code_name(int code) {
  switch (code) {
    case kSiUser:
      return "SI_USER";
    case kSiKernel:
      return "SI_KERNEL";
    case kSiQueue:
      return "SI_QUEUE";
    case -2:
      return "SI_TIMER";
    case -3:
      return "SI_MESGQ";
    case -4:
      return "SI_ASYNCIO";
    case -5:
      return "SI_SIGIO";
    case kSiTkill:
      return "SI_TKILL";
    default:
      // Positive codes are signal-specific: SEGV_MAPERR, CLD_EXITED, ...
      return fmt::format("{}", code);
  }
}

std::string result_name(int result) {
  switch (result) {
    case 0:
      return "delivered";
    case 1:
      return "ignored";
    case 2:
      return "already_pending";
    case 3:
      return "overflow";
    case 4:
      return "info_lost";
    default:
      return fmt::format("{}", result);
  }
}

std::string describe(int sig) {
  const char* text = strsignal(sig);
  return text ? text : "unknown signal";
}

json sender_json(const SignalEvent& s) {
  if (!s.sent_by_process()) return nullptr;  // raised by the kernel: no process sent it
  return {{"pid", s.sender_pid}, {"tid", s.sender_tid}, {"comm", s.sender_comm}};
}

// Removes [addr, addr + len) from the tracked large mappings: whole ones go,
// a partly unmapped one keeps its pieces that are still large.
void unmap_range(std::map<uint64_t, LiveMapping>& live, uint64_t addr, uint64_t len,
                 uint64_t large) {
  if (len == 0 || live.empty()) return;
  const uint64_t end = addr + len;
  auto it = live.lower_bound(addr);
  if (it != live.begin()) {
    auto prev = std::prev(it);
    if (prev->first + prev->second.len > addr) it = prev;
  }
  std::vector<std::pair<uint64_t, LiveMapping>> pieces;
  while (it != live.end() && it->first < end) {
    const uint64_t start = it->first;
    const uint64_t stop = start + it->second.len;
    if (start < addr)
      pieces.push_back({start, {addr - start, it->second.ts_ns, it->second.populate}});
    if (stop > end) pieces.push_back({end, {stop - end, it->second.ts_ns, it->second.populate}});
    it = live.erase(it);
  }
  for (auto& [start, m] : pieces) {
    if (m.len >= large) live.emplace(start, m);
  }
}

}  // namespace

std::optional<MmapStormDetector::Storm> MmapStormDetector::add(uint64_t ts_ns, uint64_t bytes) {
  if (!origin_ns_) origin_ns_ = ts_ns;
  window_.emplace_back(ts_ns, bytes);
  window_bytes_ += bytes;
  while (window_.front().first + options_.window_ns <= ts_ns) {
    window_bytes_ -= window_.front().second;
    window_.pop_front();
    ++before_window_;
  }
  const uint64_t count = window_.size();
  if (count > peak_count_) {
    peak_count_ = count;
    peak_at_ns_ = ts_ns;
  }
  if (reported_) return std::nullopt;
  const uint64_t first = window_.front().first;
  if (static_cast<double>(ts_ns - first) < options_.min_span_fraction * options_.window_ns) {
    return std::nullopt;
  }
  Storm storm{.count = count,
              .bytes = window_bytes_,
              .window_start_ns = first,
              .ts_ns = ts_ns,
              .rate_per_s = count * 1e9 / options_.window_ns,
              .baseline_per_s = std::nullopt,
              .threshold = options_.absolute_per_window,
              .rule = "absolute"};
  const uint64_t history = first > *origin_ns_ ? first - *origin_ns_ : 0;
  if (history >= options_.baseline_min_ns) {
    storm.baseline_per_s = before_window_ * 1e9 / history;
  }
  if (count >= options_.absolute_per_window) {
    reported_ = true;
    return storm;
  }
  if (storm.baseline_per_s) {
    const double per_window = *storm.baseline_per_s * options_.window_ns / 1e9;
    const uint64_t threshold =
        std::max(options_.relative_min_per_window,
                 static_cast<uint64_t>(std::ceil(options_.relative_factor * per_window)));
    if (count >= threshold) {
      storm.threshold = threshold;
      storm.rule = "relative";
      reported_ = true;
      return storm;
    }
  }
  return std::nullopt;
}

ProcessExit explain_exit(ProcessExit exit, const SignalEvent* signal, const OomKillEvent* oom) {
  if (!exit.signal) return exit;
  const int sig = *exit.signal;
  const std::string core = exit.core_dumped ? ", core dumped" : "";
  if (oom && sig == SIGKILL) {
    exit.cause = fmt::format("killed by the OOM killer: anon-rss {} in cgroup {}",
                             human_bytes(oom->anon_rss_bytes), oom->cgroup);
    if (oom->killer_pid != oom->pid && oom->killer_pid != 0) {
      exit.cause +=
          fmt::format(", when pid {} ({}) needed memory", oom->killer_pid, oom->killer_comm);
    }
    exit.sender.reset();
    return exit;
  }
  if (!signal || signal->sig != sig) return exit;  // the wait status says all we know
  const std::string name = signal_name(sig);
  if (!signal->sent_by_process()) {
    // Faults (SIGSEGV, SIGBUS: positive codes) keep the plain sentence;
    // SI_KERNEL covers a terminal's Ctrl-C, CPU time limits and the like.
    if (signal->code == kSiKernel) {
      exit.cause =
          fmt::format("killed by {} ({}), raised by the kernel{}", name, describe(sig), core);
    }
    return exit;
  }
  exit.sender = SignalSender{signal->sender_pid, signal->sender_comm};
  if (signal->sender_pid == signal->pid) {
    // The kernel sends SIGPIPE in the writer's own name.
    exit.cause =
        sig == SIGPIPE
            ? "killed by SIGPIPE: it wrote to a pipe or socket whose reader had gone"
            : fmt::format("killed by {} ({}) that it raised itself{}", name, describe(sig), core);
    return exit;
  }
  exit.cause = fmt::format("killed by {} from pid {} ({}){}", name, signal->sender_pid,
                           signal->sender_comm, core);
  return exit;
}

OsMonitor::OsMonitor(Options options) : options_(options) {
  activity_.slow_ioctl_ns = options_.slow_ioctl_ns;
  activity_.large_mapping_bytes = options_.large_mapping_bytes;
}

double OsMonitor::seconds(uint64_t ns) const {
  return ns > session_start_ns_ ? (ns - session_start_ns_) / 1e9 : 0.0;
}

std::string OsMonitor::who(uint32_t pid) const {
  auto it = comms_.find(pid);
  return it == comms_.end() || it->second.empty() ? fmt::format("pid {}", pid)
                                                  : fmt::format("pid {} ({})", pid, it->second);
}

void OsMonitor::on_process(uint32_t pid, const std::string& comm, uint64_t start_ns) {
  if (!comm.empty()) comms_[pid] = comm;
  if (start_ns != 0) process_start_.try_emplace(pid, start_ns);
}

void OsMonitor::on_process_exit(uint32_t pid) {
  if (auto it = activity_.mmap.find(pid); it != activity_.mmap.end()) it->second.exited = true;
  stopped_by_eacgm_.erase(pid);  // a dead child stops no more
}

void OsMonitor::forget_process(uint32_t pid) {
  // Its slow ioctls still held are judged now, while its name is known.
  std::erase_if(held_, [&](const IoctlEvent& e) {
    if (e.pid == pid) report_slow_ioctl(e);
    return e.pid == pid;
  });
  process_start_.erase(pid);
  comms_.erase(pid);
  storms_.erase(pid);
  signal_by_number_.erase(pid);
  stopped_by_eacgm_.erase(pid);
  oom_by_pid_.erase(pid);
  libraries_.erase(pid);
  std::erase_if(conflicts_reported_, [pid](const auto& key) { return key.first == pid; });
  std::erase_if(slow_reported_, [pid](const auto& key) { return key.first == pid; });
  activity_.mmap.erase(pid);
  activity_.ioctl.erase(pid);
  // The lists are the session's record; the agent keeps no record of the dead,
  // and their entries would otherwise fill the caps for good.
  std::erase_if(activity_.signals, [pid](const SignalEvent& s) { return s.pid == pid; });
  std::erase_if(activity_.oom_kills, [pid](const OomKillEvent& o) { return o.pid == pid; });
  std::erase_if(activity_.slow_ioctls, [pid](const IoctlEvent& i) { return i.pid == pid; });
}

OsMonitor::Footprint OsMonitor::footprint() const {
  std::set<uint32_t> pids;
  const auto add_keys = [&pids](const auto& by_pid) {
    for (const auto& entry : by_pid) pids.insert(entry.first);
  };
  add_keys(process_start_);
  add_keys(comms_);
  add_keys(storms_);
  add_keys(signal_by_number_);
  pids.insert(stopped_by_eacgm_.begin(), stopped_by_eacgm_.end());
  add_keys(oom_by_pid_);
  add_keys(libraries_);
  add_keys(conflicts_reported_);
  add_keys(slow_reported_);
  add_keys(activity_.mmap);
  add_keys(activity_.ioctl);
  return {.processes = pids.size(),
          .signals = activity_.signals.size(),
          .oom_kills = activity_.oom_kills.size(),
          .slow_ioctls = activity_.slow_ioctls.size()};
}

void OsMonitor::set_devices(std::string pattern, std::map<uint32_t, std::string> devices) {
  activity_.ioctl_pattern = std::move(pattern);
  for (auto& [rdev, path] : devices) activity_.devices[rdev] = std::move(path);
}

bool OsMonitor::on_signal(const SignalEvent& e) {
  // eacgm's loader stop: bpf_send_signal raises SIGSTOP in the target's own
  // context (SI_KERNEL), and eacgm sends the SIGCONT that ends it.
  if (e.sig == SIGCONT && options_.self_pid != 0 && e.sender_pid == options_.self_pid) {
    return false;
  }
  if (e.sig == SIGSTOP && e.code == kSiKernel && e.sender_pid == e.pid) {
    stopped_by_eacgm_.insert(e.pid);
    return false;
  }
  // The kernel tells a parent when its child stops and continues: for a child paused at a loader
  // stop, that is eacgm's doing too (a job whose ranks load CUDA would list a dozen of these).
  if (e.sig == SIGCHLD && (e.code == CLD_STOPPED || e.code == CLD_CONTINUED) &&
      stopped_by_eacgm_.contains(e.sender_pid)) {
    return false;
  }
  ++events_;
  if (activity_.signals.size() < options_.max_signals) {
    activity_.signals.push_back(e);
  } else {
    ++signals_dropped_;
  }
  if (e.took_effect()) signal_by_number_[e.pid][e.sig] = e;
  return true;
}

void OsMonitor::on_oom_kill(const OomKillEvent& e) {
  ++events_;
  if (activity_.oom_kills.size() < options_.max_oom_kills) {
    activity_.oom_kills.push_back(e);
  } else {
    ++oom_kills_dropped_;
  }
  oom_by_pid_[e.pid] = e;
  if (!e.comm.empty()) comms_.try_emplace(e.pid, e.comm);
  Anomaly a;
  a.kind = "oom_kill";
  a.layer = Layer::kOs;
  a.pid = e.pid;
  a.t_s = seconds(e.ts_ns);
  a.score = 0;
  a.evidence = {{"anon_rss_bytes", e.anon_rss_bytes},
                {"file_rss_bytes", e.file_rss_bytes},
                {"shmem_rss_bytes", e.shmem_rss_bytes},
                {"total_vm_bytes", e.total_vm_bytes},
                {"cgroup", e.cgroup},
                {"cgroup_version", e.cgroup_v1 ? 1 : 2},
                {"oom_score_adj", e.oom_score_adj},
                {"triggered_by", {{"pid", e.killer_pid}, {"comm", e.killer_comm}}}};
  a.message = fmt::format(
      "{} was killed by the OOM killer: anon-rss {}, total-vm {}, in memory "
      "cgroup {}",
      who(e.pid), human_bytes(e.anon_rss_bytes), human_bytes(e.total_vm_bytes), e.cgroup);
  a.suggestion =
      "raise the cgroup's memory limit or lower the job's memory use (batch size, data loader "
      "workers, prefetch buffers); layers.os.mmap shows MAP_POPULATE storms and large "
      "mappings never unmapped";
  pending_.push_back(std::move(a));
}

void OsMonitor::on_mmap(const MmapEvent& e) {
  ++events_;
  MmapStats& st = activity_.mmap[e.pid];
  const uint64_t large = options_.large_mapping_bytes;
  switch (e.op) {
    case MmapEvent::Op::kMmap:
      ++st.mmaps;
      if (e.failed()) {
        ++st.failed;
      } else {
        st.bytes_mapped += e.len;
        // A mapping replaces whatever was mapped there (MAP_FIXED).
        unmap_range(st.large_anonymous, e.addr, e.len, large);
        // PROT_NONE is address space reserved, not memory: glibc's 64 MiB
        // per-thread malloc arenas, CUDA's virtual address reservations.
        if (e.anonymous() && e.prot != 0 && e.len >= large) {
          st.large_anonymous[e.addr] = LiveMapping{e.len, e.ts_ns, e.populate()};
        }
      }
      break;
    case MmapEvent::Op::kMunmap:
      ++st.munmaps;
      if (e.failed()) {
        ++st.failed;
      } else {
        unmap_range(st.large_anonymous, e.addr, e.len, large);
      }
      break;
    case MmapEvent::Op::kMremap:
      ++st.mremaps;
      if (e.failed()) {
        ++st.failed;
      } else {
        // A tracked mapping moves or resizes with it; others stay unknown.
        auto it = st.large_anonymous.find(e.old_addr);
        std::optional<LiveMapping> moved;
        if (it != st.large_anonymous.end() && it->second.len == e.old_len) moved = it->second;
        unmap_range(st.large_anonymous, e.old_addr, e.old_len, large);
        unmap_range(st.large_anonymous, e.addr, e.len, large);
        if (moved && e.len >= large) {
          st.large_anonymous[e.addr] = LiveMapping{e.len, moved->ts_ns, moved->populate};
        }
      }
      break;
  }
  if (!e.populate()) return;

  ++st.populate.count;
  if (!e.failed()) st.populate.bytes += e.len;
  auto [it, fresh] = storms_.try_emplace(e.pid, options_.storm);
  MmapStormDetector& detector = it->second;
  if (fresh) {
    auto start = process_start_.find(e.pid);
    if (start != process_start_.end() && start->second <= e.ts_ns) {
      detector.set_origin(start->second);
    }
  }
  const std::optional<MmapStormDetector::Storm> storm =
      detector.add(e.ts_ns, e.failed() ? 0 : e.len);
  const double window_s = options_.storm.window_ns / 1e9;
  st.populate.peak_per_s = static_cast<uint64_t>(std::llround(detector.peak_count() / window_s));
  st.populate.peak_at_ns = detector.peak_at_ns();
  if (!storm) return;

  Anomaly a;
  a.kind = "mmap_storm";
  a.layer = Layer::kOs;
  a.pid = e.pid;
  a.t_s = seconds(storm->window_start_ns);
  a.score = -storm->rate_per_s;
  a.evidence = {
      {"flag", "MAP_POPULATE"},
      {"rate_per_s", storm->rate_per_s},
      {"count", storm->count},
      {"span_s", (storm->ts_ns - storm->window_start_ns) / 1e9},
      {"bytes", storm->bytes},
      {"window_s", window_s},
      {"threshold", storm->threshold},
      {"rule", storm->rule},
      {"baseline_per_s", storm->baseline_per_s ? json(*storm->baseline_per_s) : json(nullptr)},
      {"since_process_start_s",
       process_start_.contains(e.pid) && process_start_[e.pid] <= storm->window_start_ns
           ? json((storm->window_start_ns - process_start_[e.pid]) / 1e9)
           : json(nullptr)}};
  a.message = fmt::format(
      "{} made {} mmap(MAP_POPULATE) calls within {:.2f} s ({:.0f} per {:g} s window, {}; {}): "
      "each one faults in its whole mapping before returning",
      who(e.pid), storm->count, (storm->ts_ns - storm->window_start_ns) / 1e9, storm->rate_per_s,
      window_s, human_bytes(storm->bytes),
      storm->rule == "absolute"
          ? fmt::format("threshold {}/s", storm->threshold / window_s)
          : fmt::format("{:.0f}x its own rate of {:.1f}/s",
                        storm->rate_per_s / std::max(*storm->baseline_per_s, 1e-9),
                        *storm->baseline_per_s));
  a.suggestion =
      "find what maps with MAP_POPULATE (a data pipeline's prefetch or cache option changed by "
      "an upgrade, as in TF 2.15's AutoShardPolicy): map lazily, reuse buffers, or restore the "
      "previous option; watch the memory cgroup's limit, an OOM kill often follows";
  pending_.push_back(std::move(a));
}

void OsMonitor::on_ioctl(const IoctlEvent& e) {
  ++events_;
  IoctlStats& st = activity_.ioctl[e.pid][e.rdev];
  ++st.count;
  if (e.failed()) ++st.errors;
  st.total_ns += e.duration_ns;
  st.max_ns = std::max(st.max_ns, e.duration_ns);
  const int bucket = e.duration_ns == 0 ? 0 : std::bit_width(e.duration_ns) - 1;
  ++st.log2_ns[static_cast<size_t>(bucket)];
  if (e.duration_ns < options_.slow_ioctl_ns) return;
  ++st.slow;
  if (activity_.slow_ioctls.size() < options_.max_slow_ioctls) activity_.slow_ioctls.push_back(e);
  if (!slow_reported_.contains({e.pid, e.rdev})) held_.push_back(e);
}

void OsMonitor::on_traced_call(uint32_t pid, uint32_t tid, uint64_t start_ns, uint64_t end_ns) {
  if (held_.empty()) return;
  slow_in_traced_calls_ += std::erase_if(held_, [&](const IoctlEvent& e) {
    return e.pid == pid && e.tid == tid && e.ts_ns >= start_ns && e.ts_ns + e.duration_ns <= end_ns;
  });
}

void OsMonitor::report_slow_ioctl(const IoctlEvent& e) {
  if (!slow_reported_.insert({e.pid, e.rdev}).second) return;  // once per process and device
  auto dev = activity_.devices.find(e.rdev);
  const std::string device =
      dev != activity_.devices.end() ? dev->second : "device " + device_number(e.rdev);
  Anomaly a;
  a.kind = "slow_ioctl";
  a.layer = Layer::kOs;
  a.pid = e.pid;
  a.t_s = seconds(e.ts_ns);
  a.score = -(e.duration_ns / 1e6);
  a.evidence = {{"device", device},
                {"rdev", device_number(e.rdev)},
                {"request", fmt::format("{:#x}", e.request)},
                {"fd", e.fd},
                {"ret", e.ret},
                {"duration_ns", e.duration_ns},
                {"threshold_ns", options_.slow_ioctl_ns}};
  a.message = fmt::format("{}: ioctl {:#x} on {} took {:.1f} ms (threshold {:.0f} ms)", who(e.pid),
                          e.request, device, e.duration_ns / 1e6, options_.slow_ioctl_ns / 1e6);
  a.suggestion =
      "a driver call this slow stalls everything queued behind it: check the kernel log for "
      "driver errors (dmesg, NVIDIA XID), the device's health (nvidia-smi -q), and whether "
      "another process holds the device";
  pending_.push_back(std::move(a));
}

void OsMonitor::on_libraries(uint32_t pid, const std::vector<LibraryBuild>& libraries,
                             uint64_t ts_ns) {
  auto& families = libraries_[pid];
  for (const LibraryBuild& lib : libraries) {
    auto [it, fresh] = families.try_emplace(lib.family, lib);
    if (fresh || it->second.id == lib.id) continue;
    if (!conflicts_reported_.insert({pid, lib.family}).second) continue;
    const LibraryBuild& first = it->second;
    const bool same_build =
        !first.build_id.empty() && first.build_id == lib.build_id && first.size == lib.size;
    auto describe_lib = [](const LibraryBuild& l) {
      return json{{"path", l.path},
                  {"version", l.version.empty() ? json(nullptr) : json(l.version)},
                  {"soname", l.soname.empty() ? json(nullptr) : json(l.soname)},
                  {"build_id", l.build_id.empty() ? json(nullptr) : json(l.build_id)},
                  {"size", l.size},
                  {"inode", l.id.inode}};
    };
    auto short_form = [](const LibraryBuild& l) {
      std::string text = l.path + " (";
      text += l.version.empty() ? "no version" : "version " + l.version;
      if (!l.build_id.empty()) text += ", build-id " + l.build_id.substr(0, 12);
      return text + ")";
    };
    Anomaly a;
    a.kind = "library_conflict";
    a.layer = Layer::kOs;
    a.pid = pid;
    a.t_s = seconds(ts_ns);
    a.score = 0;
    a.evidence = {{"family", lib.family},
                  {"same_build", same_build},
                  {"libraries", json::array({describe_lib(first), describe_lib(lib)})}};
    a.message = fmt::format("{} has two {} of {} mapped: {} and {}", who(pid),
                            same_build ? "copies (one build)" : "builds", lib.family,
                            short_form(first), short_form(lib));
    a.suggestion =
        "each copy keeps its own state (contexts, handles, caches) and the two disagree: make "
        "every framework in the process use one copy (align the CUDA wheels or conda packages, "
        "check LD_LIBRARY_PATH and RPATHs), or run them in separate processes";
    pending_.push_back(std::move(a));
  }
}

ProcessExit OsMonitor::explain(uint32_t pid, ProcessExit exit) const {
  const SignalEvent* signal = nullptr;
  if (exit.signal) {
    if (auto p = signal_by_number_.find(pid); p != signal_by_number_.end()) {
      if (auto s = p->second.find(*exit.signal); s != p->second.end()) signal = &s->second;
    }
  }
  auto oom = oom_by_pid_.find(pid);
  return explain_exit(std::move(exit), signal, oom == oom_by_pid_.end() ? nullptr : &oom->second);
}

std::vector<Anomaly> OsMonitor::take_anomalies(uint64_t now_ns) {
  std::erase_if(held_, [&](const IoctlEvent& e) {
    const bool due = now_ns == kReleaseAll || e.ts_ns + e.duration_ns + options_.hold_ns <= now_ns;
    if (due) report_slow_ioctl(e);
    return due;
  });
  std::vector<Anomaly> out;
  out.swap(pending_);
  return out;
}

json OsMonitor::figures() const {
  json out = json::object();
  out["events"] = events_;

  json signals = json::array();
  for (const SignalEvent& s : activity_.signals) {
    signals.push_back({{"t_s", seconds(s.ts_ns)},
                       {"pid", s.pid},
                       {"tid", s.tid},
                       {"signal", s.sig},
                       {"name", signal_name(s.sig)},
                       {"code", code_name(s.code)},
                       {"group", s.group},
                       {"result", result_name(s.result)},
                       {"sender", sender_json(s)}});
  }
  out["signals"] = std::move(signals);
  if (signals_dropped_ > 0) out["signals_not_kept"] = signals_dropped_;

  json ooms = json::array();
  for (const OomKillEvent& o : activity_.oom_kills) {
    ooms.push_back({{"t_s", seconds(o.ts_ns)},
                    {"pid", o.pid},
                    {"tid", o.tid},
                    {"comm", o.comm},
                    {"anon_rss_bytes", o.anon_rss_bytes},
                    {"file_rss_bytes", o.file_rss_bytes},
                    {"shmem_rss_bytes", o.shmem_rss_bytes},
                    {"total_vm_bytes", o.total_vm_bytes},
                    {"uid", o.uid},
                    {"oom_score_adj", o.oom_score_adj},
                    {"cgroup", o.cgroup},
                    {"cgroup_id", o.cgroup_id},
                    {"cgroup_version", o.cgroup_v1 ? 1 : 2},
                    {"triggered_by", {{"pid", o.killer_pid}, {"comm", o.killer_comm}}}});
  }
  out["oom_kills"] = std::move(ooms);
  if (oom_kills_dropped_ > 0) out["oom_kills_not_kept"] = oom_kills_dropped_;

  json mmap = json::object();
  for (const auto& [pid, st] : activity_.mmap) {
    std::vector<std::pair<uint64_t, LiveMapping>> live(st.large_anonymous.begin(),
                                                       st.large_anonymous.end());
    std::sort(live.begin(), live.end(),
              [](const auto& a, const auto& b) { return a.second.len > b.second.len; });
    uint64_t live_bytes = 0;
    for (const auto& [addr, m] : live) live_bytes += m.len;
    json mappings = json::array();
    for (size_t i = 0; i < live.size() && i < 16; ++i) {
      mappings.push_back({{"addr", fmt::format("{:#x}", live[i].first)},
                          {"bytes", live[i].second.len},
                          {"t_s", seconds(live[i].second.ts_ns)},
                          {"populate", live[i].second.populate}});
    }
    mmap[std::to_string(pid)] = {
        {"mmaps", st.mmaps},
        {"munmaps", st.munmaps},
        {"mremaps", st.mremaps},
        {"failed", st.failed},
        {"bytes_mapped", st.bytes_mapped},
        {"populate",
         {{"count", st.populate.count},
          {"bytes", st.populate.bytes},
          {"peak_per_s", st.populate.peak_per_s},
          {"peak_at_s",
           st.populate.count ? json(seconds(st.populate.peak_at_ns)) : json(nullptr)}}},
        {"large_anonymous",
         {{"threshold_bytes", options_.large_mapping_bytes},
          {"outstanding", live.size()},
          {"outstanding_bytes", live_bytes},
          {"process_exited", st.exited},
          {"mappings", std::move(mappings)}}}};
  }
  out["mmap"] = std::move(mmap);

  json devices = json::object();
  for (const auto& [rdev, path] : activity_.devices) devices[path] = device_number(rdev);
  json per_pid = json::object();
  for (const auto& [pid, by_dev] : activity_.ioctl) {
    json p = json::object();
    for (const auto& [rdev, st] : by_dev) {
      json histogram = json::array();
      for (size_t k = 0; k < st.log2_ns.size(); ++k) {
        if (st.log2_ns[k] == 0) continue;
        histogram.push_back({{"ge_ns", k == 0 ? 0 : uint64_t{1} << k},
                             {"lt_ns", k >= 63 ? json(nullptr) : json(uint64_t{1} << (k + 1))},
                             {"count", st.log2_ns[k]}});
      }
      auto dev = activity_.devices.find(rdev);
      const std::string name = dev != activity_.devices.end() ? dev->second : device_number(rdev);
      p[name] = {{"count", st.count},   {"errors", st.errors}, {"total_ns", st.total_ns},
                 {"max_ns", st.max_ns}, {"slow", st.slow},     {"histogram", std::move(histogram)}};
    }
    per_pid[std::to_string(pid)] = std::move(p);
  }
  json slow = json::array();
  for (const IoctlEvent& e : activity_.slow_ioctls) {
    auto dev = activity_.devices.find(e.rdev);
    slow.push_back(
        {{"t_s", seconds(e.ts_ns)},
         {"pid", e.pid},
         {"tid", e.tid},
         {"device", dev != activity_.devices.end() ? dev->second : device_number(e.rdev)},
         {"request", fmt::format("{:#x}", e.request)},
         {"duration_ns", e.duration_ns},
         {"ret", e.ret}});
  }
  out["ioctl"] = {{"pattern", activity_.ioctl_pattern},
                  {"devices", std::move(devices)},
                  {"slow_threshold_ns", options_.slow_ioctl_ns},
                  {"processes", std::move(per_pid)},
                  {"slow", std::move(slow)},
                  {"slow_inside_traced_calls", slow_in_traced_calls_}};
  return out;
}

}  // namespace eacgm
