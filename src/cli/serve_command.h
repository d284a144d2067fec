// `eacgm serve`: the always-on agent. Traces every process on the machine
// that maps a traced library (or only those in one cgroup), detects anomalies
// live, and serves Prometheus /metrics, /healthz and /anomalies (docs/SERVE.md).
#pragma once

#include <functional>
#include <optional>
#include <set>
#include <string>

#include "probes/probe_table.h"

namespace CLI {
class App;
}

namespace eacgm {

// "cuda,nccl" -> layers, or nullopt with `error` set (the command line's parser).
using LayerParser = std::function<std::optional<std::set<Layer>>(const std::string&, std::string&)>;

struct ServeOptions {
  std::string listen = "127.0.0.1:9412";
  std::set<Layer> layers;
  std::string cgroup;  // empty: every process on the machine
  std::string btf_path;
  double hang_timeout_s = 3.0;
  double scan_interval_s = 0.5;  // how often /proc is searched for new processes
  std::string nvml_lib;
  double gpu_rate_hz = 1.0;
  bool verbose = false;
  std::string torch_ops = "default";  // torch layer: operators to trace (TorchOpFilter::parse)
  // --overhead-budget, in percent of each traced process's time (agent/duty_cycle.h).
  std::optional<double> overhead_budget_pct;
};

// Runs until SIGTERM or SIGINT; returns 0 after a clean shutdown (every probe
// removed), 2 on bad input (listen address, port in use, cgroup, privileges).
int run_serve(const ServeOptions& options);

// Registers `serve` on `app`; when parsing chose it, `run` runs it.
void add_serve_command(CLI::App& app, std::function<int()>& run, LayerParser parse_layers);

}  // namespace eacgm
