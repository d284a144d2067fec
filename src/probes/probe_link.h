// Every BPF link eacgm attaches, owned (ProbeLink), and their release together (LinkRelease).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/result.h"

struct bpf_program;
struct bpf_link;

namespace eacgm {

// BPF_TRACE_UPROBE_MULTI from the kernel UAPI; libbpf 1.1 predates it.
inline constexpr uint32_t kBpfTraceUprobeMulti = 48;

// True when the running kernel accepts uprobe_multi links (Linux 6.6+).
bool kernel_has_uprobe_multi();
// Loads a program that does nothing, for uprobe_multi links: what a bare probe costs
// (probes/trap_calibration.h). Returns its fd, or -errno.
int load_empty_uprobe_multi_program();

// Links released together. Releasing a link waits for the kernel's RCU grace periods: ~40 ms
// an uprobe_multi link here, ~60-100 ms a perf-event one, and a recording holds a dozen or
// more, so one after another they made every session's end take a second. Released from
// threads of their own, the waits overlap. (Perf-event links still wait in turn: the kernel
// releases those under one mutex; see docs/PERFORMANCE.md, start-up and teardown.)
class LinkRelease {
 public:
  LinkRelease() = default;
  LinkRelease(const LinkRelease&) = delete;
  LinkRelease& operator=(const LinkRelease&) = delete;
  ~LinkRelease() { run(); }

  void add(int link_fd);
  void add(bpf_link* link);
  // Links that share libbpf state, released one after another on one thread (beside the
  // others). A USDT link's release gives its spec ids back to its object's USDT manager, an
  // array libbpf reallocates without a lock: two released at once corrupt the heap.
  void add_in_turn(bpf_link* link);
  // Releases everything added so far, concurrently; returns once all are gone.
  void run();

 private:
  std::vector<int> fds_;
  std::vector<bpf_link*> links_;
  std::vector<bpf_link*> in_turn_;
};

// One attached BPF link, of whichever kind, owned: destroying it detaches the program, and
// release_into() hands it to a LinkRelease to go with others instead. Movable, not copyable;
// made by the factories below only, which are the one place eacgm attaches a program, and which
// say errno's reason on failure.
class ProbeLink {
 public:
  // Entry (or, with `retprobe`, return) probes on many functions of one file: `offsets[i]` is a
  // file offset, `cookies[i]` what bpf_get_attach_cookie() returns when it fires. One
  // uprobe_multi link where the kernel has them (the program must then have been loaded with
  // expected attach type kBpfTraceUprobeMulti); otherwise one perf-event link per function,
  // slow to release (~75 ms each here).
  static Result<ProbeLink> uprobes(bpf_program* prog, const std::string& path,
                                   std::span<const uint64_t> offsets,
                                   std::span<const uint64_t> cookies, bool retprobe);
  // The uprobe_multi link alone, for a program known by its fd, or where one link per function
  // will not do (duty cycling attaches and detaches the same probes every period).
  static Result<ProbeLink> uprobe_multi(int prog_fd, const std::string& path,
                                        std::span<const uint64_t> offsets,
                                        std::span<const uint64_t> cookies, bool retprobe);
  // A program whose section says where it goes: a tracepoint or a raw tracepoint.
  static Result<ProbeLink> tracepoint(bpf_program* prog);
  // The USDT probe `provider:name` of the file `path`, in every process that maps it.
  static Result<ProbeLink> usdt(bpf_program* prog, const std::string& path, const char* provider,
                                const char* name);
  // A task iterator over the threads of process `pid`.
  static Result<ProbeLink> task_iterator(bpf_program* prog, uint32_t pid);

  ProbeLink(ProbeLink&& other) noexcept;
  ProbeLink& operator=(ProbeLink&& other) noexcept;
  ProbeLink(const ProbeLink&) = delete;
  ProbeLink& operator=(const ProbeLink&) = delete;
  ~ProbeLink();

  // How many functions a uprobe link covers; 0 for the other kinds.
  size_t functions() const { return functions_; }
  // The link's own fd: -1 for a USDT link (libbpf keeps its perf events to itself) and for one
  // link per function.
  int fd() const;
  // Hands the link to `release`, to be released with others; this object is then empty.
  void release_into(LinkRelease& release);

 private:
  ProbeLink() = default;
  static Result<ProbeLink> from_libbpf(bpf_link* link, bool in_turn);
  int link_fd_ = -1;              // a uprobe_multi link, made by a bare syscall
  std::vector<bpf_link*> links_;  // libbpf's: one, or one per function without uprobe_multi
  bool in_turn_ = false;          // a USDT link shares libbpf state: LinkRelease::add_in_turn
  size_t functions_ = 0;
};

}  // namespace eacgm
