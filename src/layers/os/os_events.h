// The os layer's part of the session model: decoded kernel events (signals,
// OOM kills, memory mappings, device ioctls) and what a session learned from
// them. Plain data: the decoder fills the events, analysis/os_monitor folds
// them, the sinks write them.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "layers/layer.h"

namespace eacgm {

inline constexpr uint32_t kMapPopulate = 0x8000;  // MAP_POPULATE
inline constexpr uint32_t kMapAnonymous = 0x20;   // MAP_ANONYMOUS
inline constexpr int kSiUser = 0;                 // kill(2)
inline constexpr int kSiKernel = 0x80;            // raised by the kernel itself
inline constexpr int kSiQueue = -1;               // sigqueue(3)
inline constexpr int kSiTkill = -6;               // tkill(2), tgkill(2), raise(3)

// A signal generated for a traced process (tracepoint signal:signal_generate).
struct SignalEvent {
  static constexpr Layer kLayer = Layer::kOs;  // the layer whose records these are
  uint32_t pid = 0;                            // receiving process
  uint32_t tid = 0;                            // receiving thread
  uint64_t ts_ns = 0;
  int sig = 0;
  int code = 0;    // si_code
  int result = 0;  // 0 delivered, 1 ignored, 2 already pending, 3 overflow, 4 info lost
  bool group = false;
  uint32_t sender_pid = 0;  // the task running when it was generated
  uint32_t sender_tid = 0;
  std::string sender_comm;

  // Sent by a process through kill(2), tgkill(2) or sigqueue(3), rather than
  // raised by the kernel (faults, the OOM killer, a terminal's Ctrl-C).
  bool sent_by_process() const { return code <= 0; }
  bool took_effect() const { return result == 0 || result == 2; }
};

// The OOM killer chose a traced process (tracepoint oom:mark_victim).
struct OomKillEvent {
  static constexpr Layer kLayer = Layer::kOs;  // the layer whose records these are
  uint32_t pid = 0;
  uint32_t tid = 0;
  uint64_t ts_ns = 0;
  std::string comm;
  uint64_t total_vm_bytes = 0;
  uint64_t anon_rss_bytes = 0;
  uint64_t file_rss_bytes = 0;
  uint64_t shmem_rss_bytes = 0;
  uint32_t uid = 0;
  int oom_score_adj = 0;
  std::string cgroup;  // its memory cgroup's path ("/" for the root; "/..." starts a cut path)
  uint64_t cgroup_id = 0;
  bool cgroup_v1 = false;   // the memory controller is on a v1 hierarchy (hybrid systems)
  uint32_t killer_pid = 0;  // whose allocation invoked the OOM killer
  std::string killer_comm;
};

// A finished mmap, munmap or mremap of a traced process.
struct MmapEvent {
  static constexpr Layer kLayer = Layer::kOs;  // the layer whose records these are
  enum class Op { kMmap, kMunmap, kMremap };
  Op op = Op::kMmap;
  uint32_t pid = 0;
  uint32_t tid = 0;
  uint64_t ts_ns = 0;
  uint64_t duration_ns = 0;
  uint64_t addr = 0;      // mmap, mremap: the address returned; munmap: the address
  uint64_t len = 0;       // mremap: the new length
  uint64_t old_addr = 0;  // mmap: the hint; mremap: the old address
  uint64_t old_len = 0;   // mremap
  int64_t ret = 0;
  uint32_t prot = 0;
  uint32_t flags = 0;
  int32_t fd = -1;

  bool failed() const { return ret < 0 && ret >= -4095; }
  bool populate() const { return op == Op::kMmap && (flags & kMapPopulate) != 0; }
  bool anonymous() const { return (flags & kMapAnonymous) != 0; }
};

// A finished ioctl on a device file that matched --ioctl-devices.
struct IoctlEvent {
  static constexpr Layer kLayer = Layer::kOs;  // the layer whose records these are
  uint32_t pid = 0;
  uint32_t tid = 0;
  uint64_t ts_ns = 0;
  uint64_t duration_ns = 0;
  uint64_t request = 0;
  uint64_t arg = 0;
  int64_t ret = 0;
  int32_t fd = -1;
  uint32_t rdev = 0;  // kernel dev_t: major << 20 | minor

  bool failed() const { return ret < 0; }
};

// "SIGKILL" for 9; "SIG34" style for signals without a name.
std::string signal_name(int sig);
// "195:255" from a kernel dev_t.
std::string device_number(uint32_t rdev);

// MAP_POPULATE mappings of one process.
struct PopulateStats {
  uint64_t count = 0;
  uint64_t bytes = 0;
  uint64_t peak_per_s = 0;  // most populate mappings within any one-second window
  uint64_t peak_at_ns = 0;  // end of that window
};

// A large anonymous mapping still mapped.
struct LiveMapping {
  uint64_t len = 0;
  uint64_t ts_ns = 0;
  bool populate = false;
};

struct MmapStats {
  uint64_t mmaps = 0;
  uint64_t munmaps = 0;
  uint64_t mremaps = 0;
  uint64_t failed = 0;
  uint64_t bytes_mapped = 0;  // successful mmap lengths
  PopulateStats populate;
  std::map<uint64_t, LiveMapping> large_anonymous;  // by address: not (yet) unmapped
  bool exited = false;  // the process exited: what is left in large_anonymous went with it
};

// ioctls of one process on one device.
struct IoctlStats {
  uint64_t count = 0;
  uint64_t errors = 0;
  uint64_t total_ns = 0;
  uint64_t max_ns = 0;
  uint64_t slow = 0;                   // over the slow threshold
  std::array<uint64_t, 64> log2_ns{};  // [k]: durations in [2^k, 2^(k+1)) ns ([0] also holds 0)
};

// Everything the os layer learned in a session.
struct OsActivity {
  std::vector<SignalEvent> signals;
  std::vector<OomKillEvent> oom_kills;
  std::map<uint32_t, MmapStats> mmap;                        // by pid
  std::map<uint32_t, std::map<uint32_t, IoctlStats>> ioctl;  // by pid, then device (rdev)
  std::vector<IoctlEvent> slow_ioctls;      // the first ones over the threshold (capped)
  std::map<uint32_t, std::string> devices;  // rdev -> a path that matched the pattern
  std::string ioctl_pattern;
  uint64_t slow_ioctl_ns = 0;
  uint64_t large_mapping_bytes = 0;
};

}  // namespace eacgm
