// The loaded BPF programs of every enabled layer, the target set, and the
// libraries probed so far. Lifecycle as in libbpf-tools: open -> configure
// -> load -> attach; destroying the Tracer detaches everything.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "common/result.h"
#include "layers/torch/torch_ops.h"
#include "probes/library_finder.h"
#include "probes/probe_control.h"
#include "probes/probe_link.h"
#include "probes/probe_table.h"
#include "probes/target_guardian.h"
#include "reader/ring_reader.h"

struct bpf_object_open_opts;

namespace eacgm {

// The dynamic loader whose _dl_debug_state eacgm probes (attach_loader), to see every library a
// target maps before its code runs.
inline constexpr const char* kLoaderPath = "/lib64/ld-linux-x86-64.so.2";

struct TracedLibrary {
  Layer layer;
  std::string path;
  FileId id;
  size_t functions = 0;  // functions probed in this file
};

class Tracer : public ProbeControl {
 public:
  struct Options {
    std::set<Layer> layers;
    // Targets may be stopped for a moment: after mapping a library (core.bpf.c
    // on_dl_debug_state) and as a thread begins to unwind (torch.bpf.c on_unwind_start).
    bool stop_on_dlopen = true;
    std::string btf_path;  // custom kernel BTF (tests); empty: the running kernel's
    bool verbose = false;
    TorchOpFilter torch_ops = TorchOpFilter::default_set();  // torch layer: operators to probe
    // --overhead-budget: the rows that may be traced part of the time (may_duty_cycle) get links
    // of their own, which set_cycled_probes() attaches and releases. Needs uprobe_multi links.
    bool duty_cycle = false;
    // serve: file-name prefixes (library_layer's, "libcudart.so") of libraries whose mapping by
    // a process that is not a target yet makes it one, stopped like a target's dlopen, with a
    // ProcEvent::kNotice (bpf/core.bpf.c). Empty: off. At most EACGM_NOTICE_PREFIXES.
    std::vector<std::string> notice_libraries = {};
    // serve --cgroup: the cgroup's directory (under the cgroup v2 mount). Only processes in it
    // (or below) are noticed; one elsewhere is never stopped. Empty: every process.
    std::string notice_cgroup_dir = {};
  };
  using EventHandler = std::function<void(std::span<const std::byte>)>;

  static Result<std::unique_ptr<Tracer>> open(const Options& options, EventHandler handler);
  ~Tracer() override;
  Tracer(const Tracer&) = delete;
  Tracer& operator=(const Tracer&) = delete;

  // Traces `pid` and the children it forks from now on. The guardian learns it first: the
  // programs may stop it from then on (probes/target_guardian.h).
  Result<void> add_target(uint32_t pid);
  // What the recorder asks as targets come and go (probes/probe_control.h says what each does).
  void pass_over(uint32_t pid) override;
  Result<void> load_layers(const std::set<Layer>& layers) override;
  Result<bool> attach_library(Layer layer, const std::string& path) override;
  Result<bool> attach_unwind_guard(const std::string& path) override;
  // Traced calls that a C++ exception (or a thread's cancellation) left instead of returning.
  uint64_t calls_unwound() const override;
  // Probes the dynamic loader's rendezvous function so targets stop after
  // mapping a new library (see core.bpf.c).
  Result<void> attach_loader(const std::string& ld_so_path);

  // Waits up to timeout_ms for events and hands each to the handler.
  // Returns the number consumed, or a negative errno.
  int poll(int timeout_ms);
  // The readers' wait: until there are events to wake for or `other_fd` (a signalfd, -1 for
  // none) is readable, at most EACGM_READER_POLL_MS, since call events never wake the reader
  // (bpf/common.bpf.h); then drains. Returns the number consumed, or a negative errno.
  int wait(int other_fd);
  int drain() override;
  uint64_t dropped() const;  // failed reservations, all CPUs
  const std::vector<TracedLibrary>& libraries() const { return libraries_; }
  const TorchOpTable& torch_ops() const override { return torch_ops_; }
  // Removes every uprobe now (the maps stay, so events already in the ring
  // buffer can still be drained).
  void detach_probes();
  // Options::duty_cycle: attaches (true) or releases (false) the cycled rows' probes of every
  // library, now and for libraries probed later. A call open when they are released finishes
  // unseen; its frame is dropped at the thread's next traced call (bpf/common.bpf.h).
  Result<void> set_cycled_probes(bool on) override;
  bool cycled_probes_on() const { return cycled_on_; }

  // Why an enabled layer could not be set up (os: its tracepoints; a table layer: its programs,
  // loaded when its first library is probed), or nullopt when it works or was not needed yet.
  // Such a layer never makes open() fail: the others are still worth tracing.
  std::optional<std::string> layer_problem(Layer layer) const override;
  // Problems short of that (one tracepoint of a layer missing).
  const std::vector<std::string>& warnings() const { return warnings_; }
  // The python layer (ProbeControl says what each does).
  Result<void> add_python_process(uint32_t pid, uint64_t runtime, uint32_t layout) override;
  void remove_python_process(uint32_t pid) override;
  Result<bool> attach_python_usdt(const std::string& path, bool calls) override;
  // Samples the Python stacks of every registered process's threads `hz` times a second, on a
  // thread of its own, until the Tracer is destroyed or detach_probes().
  void start_python_sampler(double hz) override;
  std::vector<PythonCallCount> python_call_counts() const override;

  // What eacgm's programs cost, by the object they belong to ("core", "python", a layer's name),
  // from the kernel's BPF run-time statistics, which the Tracer turns on while it lives.
  struct ProgramCost {
    std::string group;
    uint64_t hits = 0;      // times the programs ran, every process
    uint64_t run_ns = 0;    // their run time in the kernel
    bool traps = false;     // uprobes: each hit also paid a breakpoint trap
    bool in_agent = false;  // runs in eacgm's own threads (the python sampler), not the job's
  };
  std::vector<ProgramCost> program_costs() const;
  // Why program_costs() counts nothing (no BPF stats on this kernel), or nullopt.
  const std::optional<std::string>& program_costs_problem() const { return stats_problem_; }

  Result<void> set_ioctl_devices(const std::set<uint32_t>& rdevs) override;

 private:
  Tracer() = default;
  // The python layer's programs and sampler, loaded when the first interpreter is registered
  // (add_python_process, attach_python_usdt): while its process is stopped at the loader, so
  // before any Python code runs. A failure is the layer's problem from then on.
  Result<void> load_python();
  // First, so that it goes last: its clean end comes after every link is gone.
  std::optional<TargetGuardian> guardian_;
  struct Programs;
  std::unique_ptr<Programs> programs_;
  std::unique_ptr<RingReader> ring_;
  EventHandler handler_;
  bool may_stop_ = true;  // Options::stop_on_dlopen
  // What load_layers needs after open(): the enabled table layers, loaded or not, and how.
  std::set<Layer> table_layers_;
  std::string btf_path_;         // Options::btf_path
  bool py_attribution_ = false;  // the python layer is on: calls carry their Python line
  double sampler_hz_ = 0;        // start_python_sampler's, for a sampler not loaded yet
  std::vector<TracedLibrary> libraries_;
  std::vector<ProbeLink> probes_;        // the layers' call probes
  std::vector<ProbeLink> guard_probes_;  // loader stop, unwind guards
  // Options::duty_cycle: each library's cycled rows, and their probes while attached.
  struct CycledRows {
    bpf_program* entry = nullptr;
    bpf_program* ret = nullptr;
    std::string path;
    std::vector<uint64_t> offsets, cookies;
  };
  Result<void> attach_cycled(const CycledRows& rows);
  bool duty_cycle_ = false;
  bool cycled_on_ = true;
  std::vector<CycledRows> cycled_;
  std::vector<ProbeLink> cycled_probes_;
  std::map<Layer, std::string> layer_problems_;
  std::vector<std::string> warnings_;
  std::set<uint32_t> ioctl_devices_;
  TorchOpFilter torch_filter_;
  TorchOpTable torch_ops_;
  std::set<FileId> torch_skipped_;  // torch libraries examined and found nothing to probe in
  std::set<FileId> unwind_guarded_;
  struct PythonSampler;
  std::unique_ptr<PythonSampler> python_;
  std::set<FileId> python_usdt_files_;
  int stats_fd_ = -1;  // holds the kernel's BPF run-time statistics on
  std::optional<std::string> stats_problem_;
};

}  // namespace eacgm
