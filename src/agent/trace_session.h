// `eacgm record` and `eacgm attach`: set up the tracer, run until the job
// ends (or the duration, or Ctrl-C), and write the session directory.
#pragma once

#include <optional>
#include <set>
#include <string>
#include <vector>

#include "agent/agent_options.h"
#include "common/exit_codes.h"

namespace eacgm {

struct TraceOptions {
  AgentOptions agent;   // what is traced, and how (shared with serve)
  std::string out_dir;  // the session directory
  bool quiet = false;   // no report on stdout
};

// Runs `command` traced from its first instruction; returns its exit code.
int run_record(const TraceOptions& options, const std::vector<std::string>& command);
// Traces a running process and its descendants; returns 0 on success.
int run_attach(const TraceOptions& options, int pid, std::optional<double> duration_s);

}  // namespace eacgm
