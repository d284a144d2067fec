// Reads what tracing has cost so far (session/overhead.h) for record, attach and serve alike:
// the Tracer's program figures, this boot's trap cost, eacgm's own CPU time and peak memory.
#pragma once

#include <map>
#include <optional>
#include <string>

#include "probes/probe_table.h"
#include "probes/trap_calibration.h"
#include "session/overhead.h"

namespace eacgm {

class Tracer;

class OverheadMeter {
 public:
  // Measures (or reads the cached) trap cost: call it where a ~0.1 s measurement may happen
  // once per boot, after the job (record) or at start-up (serve).
  void measure_trap_cost();
  // --overhead-budget weighs calls by what they cost from the first one: measures the trap cost
  // now, and says why a budget cannot be kept when it is unknown.
  std::optional<std::string> prepare_budget();
  // The figures now; measures the trap cost first if that was never done.
  TracingOverhead read(const Tracer& tracer);
  // What one traced call of each probed layer costs the job now, in ns: an entry and a return,
  // each a trap and its program's mean run time (the trap alone before the program has run).
  std::map<Layer, double> call_costs_ns(const Tracer& tracer);

 private:
  std::optional<Result<TrapCost>> trap_;
};

}  // namespace eacgm
