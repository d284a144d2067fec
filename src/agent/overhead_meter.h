// Reads what tracing has cost so far (session/overhead.h) for record, attach and serve alike:
// the Tracer's program figures, this boot's trap cost, eacgm's own CPU time and peak memory.
#pragma once

#include <optional>

#include "probes/trap_calibration.h"
#include "session/overhead.h"

namespace eacgm {

class Tracer;

class OverheadMeter {
 public:
  // Measures (or reads the cached) trap cost: call it where a ~0.1 s measurement may happen
  // once per boot, after the job (record) or at start-up (serve).
  void measure_trap_cost();
  // The figures now; measures the trap cost first if that was never done.
  TracingOverhead read(const Tracer& tracer);

 private:
  std::optional<Result<TrapCost>> trap_;
};

}  // namespace eacgm
