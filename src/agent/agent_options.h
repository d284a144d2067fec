// What the flags of `record`, `attach` and `serve` say about tracing: one struct, so that a flag
// means the same in each mode (agent/agent_runtime.h reads it; cli/ fills it), and how each mode
// keeps its session. Each layer's runtime takes its own settings from them
// (layers/layer_runtime.h).
#pragma once

#include <optional>
#include <set>
#include <string>

#include "layers/nccl/collectives.h"
#include "layers/os/os_monitor.h"
#include "probes/probe_table.h"

namespace eacgm {

// What the flags of the live modes say, one field per flag (cli/ parses them).
struct AgentOptions {
  std::set<Layer> layers;
  std::string btf_path;  // a custom kernel BTF file, for kernels without /sys/kernel/btf/vmlinux
  bool stop_on_dlopen = true;
  bool verbose = false;
  double hang_timeout_s = 3.0;  // a collective some ranks never entered for this long is a hang
  std::string ioctl_devices = "/dev/nvidia*";  // os layer: device files whose ioctls are timed
  // gpu layer: the NVML to dlopen (empty: libnvidia-ml.so.1 on the library search path), and
  // how many times a second each device is read.
  std::string nvml_lib;
  double gpu_rate_hz = 10.0;
  // torch layer: "default", "all" or a regular expression (see TorchOpFilter::parse).
  std::string torch_ops = "default";
  // python layer: stack samples per second per thread, and how long one call may stay the
  // innermost Python frame before it is a slow_call anomaly.
  double python_rate_hz = 99.0;
  double python_slow_ms = 100.0;
  bool python_calls = false;  // count calls through USDT (python:function__return)
  // --overhead-budget, in percent of each traced process's time (agent/duty_cycle.h).
  std::optional<double> overhead_budget_pct;
};

// How a mode keeps its session. record and attach keep everything for summary.json; serve runs
// for days, so what it keeps is bounded.
struct AgentMode {
  bool keep_durations = true;  // every call's duration (serve: fixed-bucket histograms instead)
  // Collectives each rank is judged on for stragglers (CollectiveTracker::Options).
  size_t straggler_window = CollectiveTracker::Options{}.straggler_window;
  OsMonitor::Options os_monitor;  // its self_pid is set by AgentRuntime: eacgm's own
  // serve: a process that maps a library of a traced layer becomes a target as it maps it
  // (Tracer::Options::notice_libraries); Recorder::set_notice_handler decides which to keep.
  bool notice_libraries = false;
  // Only processes in this cgroup directory are noticed (Tracer::Options::notice_cgroup_dir).
  std::string notice_cgroup_dir;
  // The trap cost (OverheadMeter) is measured at start-up, once a boot, where the mode has no
  // end to measure it after (serve); record and attach measure it after the job, not beside it.
  bool trap_cost_at_start = false;
  std::string output_dir;  // flight recorders are written here; empty: none
};

}  // namespace eacgm
