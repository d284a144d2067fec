// `eacgm serve`: the always-on agent. Traces every process on the machine that maps a traced
// library (or only those in one cgroup), detects anomalies live, and serves Prometheus /metrics,
// /healthz and /anomalies (docs/SERVE.md). The agent runtime is record's and attach's; serve
// differs in how it finds its targets (/proc scans and the kernel's notice) and in its sink.
#pragma once

#include <string>

#include "agent/agent_options.h"

namespace eacgm {

struct ServeOptions {
  AgentOptions agent;  // what is traced, and how (shared with record and attach)
  std::string listen = "127.0.0.1:9412";
  std::string cgroup;            // empty: every process on the machine
  double scan_interval_s = 0.5;  // how often /proc is searched for new processes
};

// Runs until SIGTERM, SIGINT or SIGHUP; returns 0 after a clean shutdown (every probe removed),
// 2 on bad input (listen address, port in use, cgroup, privileges).
int run_serve(const ServeOptions& options);

}  // namespace eacgm
