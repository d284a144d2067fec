// What tracing cost, in eacgm's own figures: summary.json's `overhead`, one line of the report.
//
// A traced call costs the job a breakpoint trap on entry and on return (trap_ns_per_hit, measured
// by eacgm on this boot: probes/trap_calibration.h) plus eacgm's program each time (the kernel's
// run-time statistics: bpf_ns). Tracepoints trap nothing: only their programs count. The python
// sampler's iterator runs in eacgm's own thread, so it is eacgm's CPU, not the job's time.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace eacgm {

// Stops eacgm itself makes a target wait in: at each library load (its probes go in before the
// library's first instruction) and as a thread unwinds across return probes.
struct TargetPauses {
  uint64_t count = 0;
  uint64_t total_ns = 0;
  uint64_t longest_ns = 0;
};

// --overhead-budget's account (agent/duty_cycle.h): how much of the time the rows that may be
// traced part of the time were, and what that cost.
struct DutyCycleFigures {
  double budget = 0;           // as given, a fraction of each process's time
  double traced_fraction = 1;  // of the session so far, the share its cycled rows were traced
  uint64_t on_phases = 0;
  // The costliest process's slowdown while traced, at the last on-phase's end (a fraction).
  double slowdown_while_traced = 0;
  // Of that, the calls always traced (allocations, frees, NCCL): above the budget, the budget
  // cannot hold, however little the cycled calls are traced.
  double always_traced_slowdown = 0;
  // The costliest process's cost in on-phases over the session's time so far: what the budget
  // holds (a fraction).
  double estimated_slowdown = 0;
  // What a cycled call count seen multiplies by to estimate the whole session's: the traced
  // share's inverse, and more, as the job made its calls more slowly while traced than while not
  // (DutyCycle::count_scale says how that is measured).
  double count_scale = 1;
  // The off-phases, [start, end) in ns from the session's start (the first kMaxUntraced).
  static constexpr size_t kMaxUntraced = 10000;
  std::vector<std::pair<uint64_t, uint64_t>> untraced;
};

struct TracingOverhead {
  struct Programs {
    std::string group;  // "core", "python" or a layer's name
    uint64_t hits = 0;  // runs, every process that ran a probed function or syscall
    uint64_t bpf_ns = 0;
    bool traps = false;     // uprobes
    bool in_agent = false;  // runs in eacgm's threads
  };
  std::vector<Programs> programs;
  std::optional<std::string> programs_problem;  // why there are no program figures
  std::optional<double> trap_ns_per_hit;
  std::string trap_source;  // "measured", "cached for this boot", or why unknown
  double agent_cpu_s = 0;
  uint64_t agent_peak_rss_bytes = 0;
  TargetPauses pauses;
  std::optional<DutyCycleFigures> duty_cycle;  // with --overhead-budget

  // The job's programs by layer (group), the python sampler's left out.
  struct LayerCost {
    uint64_t hits = 0, bpf_ns = 0;
    bool traps = false;  // some of them are uprobes
  };
  std::map<std::string, LayerCost> job_layers() const;
  // What one hit of `layer` cost the job on average: its program time, and the trap when its
  // programs are uprobes. Needs trap_ns_per_hit.
  double ns_per_hit(const LayerCost& layer) const;

  // The time the job lost to tracing, summed over its threads: nullopt without program figures
  // or a trap cost.
  std::optional<double> estimated_added_s() const;
  // That time against the session's, as a slowdown: added / (duration - added). For a job whose
  // traced calls run in parallel threads or processes it is an upper bound.
  std::optional<double> estimated_slowdown_pct(double duration_s) const;
  nlohmann::json to_json(double duration_s) const;
  std::string report_line(double duration_s) const;
};

}  // namespace eacgm
