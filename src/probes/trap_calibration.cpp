#include "probes/trap_calibration.h"

#include <bpf/bpf.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

#include "probes/probe_link.h"

// The function timed, in assembly so that it begins as most functions of the libraries eacgm
// probes do (libcudart's: push %rbp): the kernel emulates that instruction, where it must
// single-step most others out of line, at several times the cost (here ~5 us a hit for a
// leading `lea` or `endbr64`).
extern "C" int eacgm_trap_calibration_target(int x);
asm(R"(
  .text
  .globl eacgm_trap_calibration_target
  .type eacgm_trap_calibration_target, @function
eacgm_trap_calibration_target:
  push %rbp
  mov %rsp, %rbp
  lea 1(%rdi), %eax
  pop %rbp
  ret
  .size eacgm_trap_calibration_target, .-eacgm_trap_calibration_target
)");

namespace eacgm {
namespace {

constexpr const char* kCacheDir = "/run/eacgm";
constexpr const char* kCachePath = "/run/eacgm/trap-cost";

std::string boot_id() {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string id;
  std::getline(in, id);
  return id;
}

// Nanoseconds per call of the target, over `calls` calls.
double time_calls(int calls) {
  int (*volatile target)(int) = eacgm_trap_calibration_target;
  int acc = 0;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < calls; ++i) acc = target(acc);
  const std::chrono::duration<double, std::nano> took = std::chrono::steady_clock::now() - start;
  asm volatile("" : : "r"(acc));
  return took.count() / calls;
}

// The lower quartile of `rounds` timings of `calls` calls each. The cache keeps the figure for the
// whole boot, so it must not be the load of the moment it was taken: with two busy processes on
// this 2-CPU machine the median of five 4,000-call rounds read 1,060 ns against 470-570 ns quiet.
// A round short enough to run within one time slice is undisturbed in many of many rounds, and
// interference only adds time; but the very fastest round is a best case (caches warm, no
// interrupt) that a job's calls do not see, and made the estimate of bench/overhead_estimate.sh
// 0.73 of the time really added. docs/PERFORMANCE.md has the figures.
double lower_quartile_time(int rounds, int calls) {
  std::vector<double> t;
  for (int r = 0; r < rounds; ++r) t.push_back(time_calls(calls));
  std::sort(t.begin(), t.end());
  return t[t.size() / 4];
}

struct CodeLocation {
  std::string path;
  uint64_t file_offset = 0;
};

// Where the target's code is in its file, from this process's own mappings.
Result<CodeLocation> locate_target() {
  const auto address = reinterpret_cast<uint64_t>(&eacgm_trap_calibration_target);
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    uint64_t start = 0, end = 0, offset = 0;
    char perms[8] = {};
    int path_at = 0;
    if (sscanf(line.c_str(), "%" SCNx64 "-%" SCNx64 " %7s %" SCNx64 " %*s %*s %n", &start, &end,
               perms, &offset, &path_at) < 4) {
      continue;
    }
    if (address < start || address >= end || path_at <= 0) continue;
    std::string path = line.substr(static_cast<size_t>(path_at));
    if (path.empty() || path[0] != '/') break;
    return CodeLocation{path, address - start + offset};
  }
  return Error{"cannot find eacgm's own code in /proc/self/maps"};
}

Result<double> measure() {
  if (!kernel_has_uprobe_multi()) {
    return Error{"not measured: the kernel has no uprobe_multi links (Linux 6.6+)"};
  }
  auto where = locate_target();
  if (!where) return where.error();
  const int prog = load_empty_uprobe_multi_program();
  if (prog < 0) {
    return Error{
        fmt::format("not measured: cannot load an empty probe program: {}", std::strerror(-prog))};
  }
  constexpr int kRounds = 21, kCalls = 1000;  // a traced round: ~1 ms
  const double bare = lower_quartile_time(kRounds, kCalls * 10);
  const uint64_t offset[] = {where->file_offset}, cookie[] = {0};
  double traced = 0;
  {
    auto entry = ProbeLink::uprobe_multi(prog, where->path, offset, cookie, false);
    auto ret = entry ? ProbeLink::uprobe_multi(prog, where->path, offset, cookie, true)
                     : Result<ProbeLink>(entry.error());
    if (!ret) {
      close(prog);
      return Error{"not measured: " + ret.error().message};
    }
    time_calls(200);  // the first return probe of a process sets up its trampoline page
    traced = lower_quartile_time(kRounds, kCalls);
    // The empty program's own run, where the kernel counts it (BPF stats on): summary.json
    // counts eacgm's programs apart, so the trap is the rest.
    bpf_prog_info info{};
    uint32_t len = sizeof(info);
    if (bpf_obj_get_info_by_fd(prog, &info, &len) == 0 && info.run_cnt > 0) {
      traced -= 2.0 * static_cast<double>(info.run_time_ns) / static_cast<double>(info.run_cnt);
    }
    LinkRelease both;
    entry->release_into(both);
    ret->release_into(both);
  }
  close(prog);
  return std::max(0.0, (traced - bare) / 2);
}

void write_cache(const std::string& id, double ns) {
  mkdir(kCacheDir, 0755);  // exists already, or /run is not ours: the write below says
  const std::string tmp = fmt::format("{}.{}", kCachePath, getpid());
  {
    std::ofstream out(tmp);
    out << format_trap_cache(id, ns);
    if (!out) {
      unlink(tmp.c_str());
      return;  // a cache only: the next run measures again
    }
  }
  if (rename(tmp.c_str(), kCachePath) != 0) unlink(tmp.c_str());
}

}  // namespace

std::optional<double> parse_trap_cache(const std::string& text, const std::string& id) {
  std::istringstream in(text);
  std::string cached_id;
  double ns = -1;
  if (!(in >> cached_id >> ns) || id.empty() || cached_id != id || !(ns >= 0) || ns > 1e6) {
    return std::nullopt;
  }
  return ns;
}

std::string format_trap_cache(const std::string& id, double ns_per_hit) {
  return fmt::format("{} {:.1f}\n", id, ns_per_hit);
}

Result<TrapCost> trap_cost_per_hit() {
  const std::string id = boot_id();
  {
    std::ifstream in(kCachePath);
    std::stringstream text;
    text << in.rdbuf();
    if (auto ns = parse_trap_cache(text.str(), id)) return TrapCost{*ns, true};
  }
  auto ns = measure();
  if (!ns) return ns.error();
  if (!id.empty()) write_cache(id, *ns);
  return TrapCost{*ns, false};
}

}  // namespace eacgm
