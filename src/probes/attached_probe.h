// One attached uprobe link set, owned RAII-style: destroying the object
// detaches the probes. Non-copyable; created by the factories below only.
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

// One libbpf link of the kinds that are not a uprobe set (AttachedProbe, below): a tracepoint, a
// USDT probe, a task iterator. Owned: destroying it releases the link, and release_into() hands
// it to a LinkRelease with the others instead. Made by the factories below only, which say
// errno's reason on failure.
class BpfLink {
 public:
  // A program whose section says where it goes: a tracepoint or a raw tracepoint.
  static Result<BpfLink> attach(bpf_program* prog);
  // The USDT probe `provider:name` of the file `path`, in every process that maps it.
  static Result<BpfLink> attach_usdt(bpf_program* prog, const std::string& path,
                                     const char* provider, const char* name);
  // A task iterator over the threads of process `pid`.
  static Result<BpfLink> attach_task_iterator(bpf_program* prog, uint32_t pid);

  BpfLink(BpfLink&& other) noexcept;
  BpfLink& operator=(BpfLink&& other) noexcept;
  BpfLink(const BpfLink&) = delete;
  BpfLink& operator=(const BpfLink&) = delete;
  ~BpfLink();

  int fd() const;  // -1 for a USDT link, which has no fd of its own
  void release_into(LinkRelease& release);

 private:
  BpfLink(bpf_link* link, bool in_turn) : link_(link), in_turn_(in_turn) {}
  bpf_link* link_ = nullptr;
  bool in_turn_ = false;  // USDT links share libbpf state: LinkRelease::add_in_turn
};

class AttachedProbe {
 public:
  // Many functions of one file with one link: `offsets[i]` is a file offset,
  // `cookies[i]` what bpf_get_attach_cookie() returns when it fires. The
  // program must have been loaded with expected attach type
  // kBpfTraceUprobeMulti.
  static Result<std::unique_ptr<AttachedProbe>> attach_multi(const bpf_program* prog,
                                                             const std::string& path,
                                                             std::span<const uint64_t> offsets,
                                                             std::span<const uint64_t> cookies,
                                                             bool retprobe);
  static Result<std::unique_ptr<AttachedProbe>> attach_multi(int prog_fd, const std::string& path,
                                                             std::span<const uint64_t> offsets,
                                                             std::span<const uint64_t> cookies,
                                                             bool retprobe);
  // The fallback for kernels without uprobe_multi: one perf-event link per
  // function. Slow to tear down (~75 ms per link here), so only used when
  // the multi link is unavailable.
  static Result<std::unique_ptr<AttachedProbe>> attach_each(bpf_program* prog,
                                                            const std::string& path,
                                                            std::span<const uint64_t> offsets,
                                                            std::span<const uint64_t> cookies,
                                                            bool retprobe);
  ~AttachedProbe();
  AttachedProbe(const AttachedProbe&) = delete;
  AttachedProbe& operator=(const AttachedProbe&) = delete;

  size_t functions() const { return functions_; }
  // Hands this probe's links to `release`, to be released with others; the probe is then
  // empty.
  void release_into(LinkRelease& release);

 private:
  AttachedProbe() = default;
  int link_fd_ = -1;
  std::vector<bpf_link*> links_;
  size_t functions_ = 0;
};

}  // namespace eacgm
