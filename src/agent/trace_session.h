// `eacgm record` and `eacgm attach`: set up the tracer, run until the job
// ends (or the duration, or Ctrl-C), and write the session directory.
#pragma once

#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/exit_codes.h"
#include "probes/probe_table.h"

namespace eacgm {

struct TraceOptions {
  std::string out_dir;
  std::set<Layer> layers;
  std::string btf_path;  // a custom kernel BTF file, for kernels without /sys/kernel/btf/vmlinux
  bool stop_on_dlopen = true;
  bool verbose = false;
  bool quiet = false;           // no report on stdout
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

// Runs `command` traced from its first instruction; returns its exit code.
int run_record(const TraceOptions& options, const std::vector<std::string>& command);
// Traces a running process and its descendants; returns 0 on success.
int run_attach(const TraceOptions& options, int pid, std::optional<double> duration_s);

}  // namespace eacgm
