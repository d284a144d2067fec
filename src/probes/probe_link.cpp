#include "probes/probe_link.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <fmt/format.h>
#include <linux/bpf.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <system_error>
#include <thread>
#include <utility>

namespace eacgm {
namespace {

// The `link_create` member of union bpf_attr for uprobe_multi, laid out as
// in the kernel UAPI (include/uapi/linux/bpf.h, Linux 6.6+). The system's
// linux/bpf.h is older and lacks it.
struct UprobeMultiLinkAttr {
  uint32_t prog_fd;          // @0
  uint32_t target_fd;        // @4
  uint32_t attach_type;      // @8
  uint32_t flags;            // @12
  uint64_t path;             // @16
  uint64_t offsets;          // @24
  uint64_t ref_ctr_offsets;  // @32
  uint64_t cookies;          // @40
  uint32_t cnt;              // @48
  uint32_t multi_flags;      // @52: 1 = return probes
  uint32_t pid;              // @56: 0 = every process
  uint32_t pad;
};
static_assert(offsetof(UprobeMultiLinkAttr, path) == 16);
static_assert(offsetof(UprobeMultiLinkAttr, cnt) == 48);
static_assert(offsetof(UprobeMultiLinkAttr, pid) == 56);

constexpr uint32_t kUprobeMultiReturn = 1;

}  // namespace

int load_empty_uprobe_multi_program() {
  const struct bpf_insn insns[] = {
      {.code = BPF_ALU64 | BPF_MOV | BPF_K, .dst_reg = BPF_REG_0, .src_reg = 0, .off = 0, .imm = 0},
      {.code = BPF_JMP | BPF_EXIT, .dst_reg = 0, .src_reg = 0, .off = 0, .imm = 0},
  };
  LIBBPF_OPTS(bpf_prog_load_opts, opts,
              .expected_attach_type = static_cast<bpf_attach_type>(kBpfTraceUprobeMulti));
  const int fd = bpf_prog_load(BPF_PROG_TYPE_KPROBE, "eacgm_probe", "GPL", insns,
                               sizeof(insns) / sizeof(insns[0]), &opts);
  return fd < 0 ? -errno : fd;
}

bool kernel_has_uprobe_multi() {
  static const bool supported = [] {
    // A kernel that knows the attach type accepts a program loaded for it.
    const int fd = load_empty_uprobe_multi_program();
    if (fd < 0) return false;
    close(fd);
    return true;
  }();
  return supported;
}

Result<ProbeLink> ProbeLink::uprobes(bpf_program* prog, const std::string& path,
                                     std::span<const uint64_t> offsets,
                                     std::span<const uint64_t> cookies, bool retprobe) {
  if (kernel_has_uprobe_multi()) {
    return uprobe_multi(bpf_program__fd(prog), path, offsets, cookies, retprobe);
  }
  ProbeLink probe;
  for (size_t i = 0; i < offsets.size(); ++i) {
    LIBBPF_OPTS(bpf_uprobe_opts, opts, .bpf_cookie = cookies[i], .retprobe = retprobe);
    bpf_link* link = bpf_program__attach_uprobe_opts(prog, -1, path.c_str(), offsets[i], &opts);
    if (!link) {
      return Error{fmt::format("cannot attach uprobe to {}+{:#x}: {}", path, offsets[i],
                               std::strerror(errno))};
    }
    probe.links_.push_back(link);  // released with `probe` should a later one fail
  }
  probe.functions_ = offsets.size();
  return probe;
}

Result<ProbeLink> ProbeLink::uprobe_multi(int prog_fd, const std::string& path,
                                          std::span<const uint64_t> offsets,
                                          std::span<const uint64_t> cookies, bool retprobe) {
  UprobeMultiLinkAttr attr{};
  attr.prog_fd = static_cast<uint32_t>(prog_fd);
  attr.attach_type = kBpfTraceUprobeMulti;
  attr.path = reinterpret_cast<uint64_t>(path.c_str());
  attr.offsets = reinterpret_cast<uint64_t>(offsets.data());
  attr.cookies = reinterpret_cast<uint64_t>(cookies.data());
  attr.cnt = static_cast<uint32_t>(offsets.size());
  attr.multi_flags = retprobe ? kUprobeMultiReturn : 0;
  const long fd = syscall(__NR_bpf, BPF_LINK_CREATE, &attr, sizeof(attr));
  if (fd < 0) {
    return Error{fmt::format("cannot attach {} uprobes to {}: {}", offsets.size(), path,
                             std::strerror(errno))};
  }
  ProbeLink probe;
  probe.link_fd_ = static_cast<int>(fd);
  probe.functions_ = offsets.size();
  return probe;
}

void LinkRelease::add(int link_fd) {
  if (link_fd >= 0) fds_.push_back(link_fd);
}

void LinkRelease::add(bpf_link* link) {
  if (link) links_.push_back(link);
}

void LinkRelease::add_in_turn(bpf_link* link) {
  if (link) in_turn_.push_back(link);
}

void LinkRelease::run() {
  // One index per fd and per link, and a last one for all the links released in turn.
  const size_t total = fds_.size() + links_.size() + (in_turn_.empty() ? 0 : 1);
  auto release = [this](size_t i) {
    if (i < fds_.size()) {
      close(fds_[i]);
    } else if (i < fds_.size() + links_.size()) {
      bpf_link__destroy(links_[i - fds_.size()]);
    } else {
      for (bpf_link* link : in_turn_) bpf_link__destroy(link);
    }
  };
  // A thread per link, up to a bound (the fallback's one link per function can be hundreds).
  const size_t threads = std::min<size_t>(total, 32);
  auto slice = [&release, threads, total](size_t t) {
    for (size_t i = t; i < total; i += threads) release(i);
  };
  std::vector<std::thread> workers;
  size_t t = 1;  // slice 0 is this thread's
  try {
    for (; t < threads; ++t) workers.emplace_back(slice, t);
  } catch (const std::system_error&) {
    // No thread to be had: the slices not handed out are released here, in turn.
  }
  for (size_t rest = t; rest < threads; ++rest) slice(rest);
  if (total > 0) slice(0);
  for (std::thread& worker : workers) worker.join();
  fds_.clear();
  links_.clear();
  in_turn_.clear();
}

// One libbpf link, or errno's reason.
Result<ProbeLink> ProbeLink::from_libbpf(bpf_link* link, bool in_turn) {
  if (!link) return Error{std::strerror(errno)};
  ProbeLink probe;
  probe.links_.push_back(link);
  probe.in_turn_ = in_turn;
  return probe;
}

Result<ProbeLink> ProbeLink::tracepoint(bpf_program* prog) {
  return from_libbpf(bpf_program__attach(prog), false);
}

Result<ProbeLink> ProbeLink::usdt(bpf_program* prog, const std::string& path, const char* provider,
                                  const char* name) {
  return from_libbpf(bpf_program__attach_usdt(prog, -1, path.c_str(), provider, name, nullptr),
                     true);
}

Result<ProbeLink> ProbeLink::task_iterator(bpf_program* prog, uint32_t pid) {
  union bpf_iter_link_info info {};
  info.task.pid = pid;
  LIBBPF_OPTS(bpf_iter_attach_opts, opts, .link_info = &info, .link_info_len = sizeof(info));
  return from_libbpf(bpf_program__attach_iter(prog, &opts), false);
}

ProbeLink::ProbeLink(ProbeLink&& other) noexcept
    : link_fd_(std::exchange(other.link_fd_, -1)),
      links_(std::exchange(other.links_, {})),
      in_turn_(other.in_turn_),
      functions_(std::exchange(other.functions_, 0)) {}

ProbeLink& ProbeLink::operator=(ProbeLink&& other) noexcept {
  if (this != &other) {
    ProbeLink old(std::move(*this));  // released as it goes out of scope
    link_fd_ = std::exchange(other.link_fd_, -1);
    links_ = std::exchange(other.links_, {});
    in_turn_ = other.in_turn_;
    functions_ = std::exchange(other.functions_, 0);
  }
  return *this;
}

ProbeLink::~ProbeLink() {
  if (link_fd_ < 0 && links_.empty()) return;
  LinkRelease release;
  release_into(release);
}

int ProbeLink::fd() const {
  if (link_fd_ >= 0) return link_fd_;
  if (in_turn_ || links_.size() != 1) return -1;
  return bpf_link__fd(links_.front());
}

void ProbeLink::release_into(LinkRelease& release) {
  release.add(link_fd_);
  link_fd_ = -1;
  for (bpf_link* link : links_) {
    if (in_turn_) {
      release.add_in_turn(link);
    } else {
      release.add(link);
    }
  }
  links_.clear();
  functions_ = 0;
}

}  // namespace eacgm
