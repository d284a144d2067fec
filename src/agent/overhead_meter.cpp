#include "agent/overhead_meter.h"

#include <fmt/format.h>
#include <sys/resource.h>

#include "probes/tracer.h"

namespace eacgm {

void OverheadMeter::measure_trap_cost() {
  if (!trap_) trap_ = trap_cost_per_hit();
}

std::optional<std::string> OverheadMeter::prepare_budget() {
  measure_trap_cost();
  if (*trap_) return std::nullopt;
  return fmt::format(
      "--overhead-budget needs what a probe trap costs on this machine, which eacgm could not "
      "measure ({}); trace without a budget",
      trap_->error().message);
}

std::map<Layer, double> OverheadMeter::call_costs_ns(const Tracer& tracer) {
  const TracingOverhead o = read(tracer);
  const double trap = o.trap_ns_per_hit.value_or(0);
  const std::map<std::string, TracingOverhead::LayerCost> by_group = o.job_layers();
  std::map<Layer, double> out;
  for (Layer layer : all_layers()) {
    const auto it = by_group.find(std::string(layer_name(layer)));
    const bool ran = it != by_group.end() && it->second.hits > 0;
    out[layer] = 2 * (ran ? o.ns_per_hit(it->second) : trap);
  }
  return out;
}

TracingOverhead OverheadMeter::read(const Tracer& tracer) {
  measure_trap_cost();
  TracingOverhead o;
  o.programs_problem = tracer.program_costs_problem();
  for (const Tracer::ProgramCost& c : tracer.program_costs()) {
    o.programs.push_back({c.group, c.hits, c.run_ns, c.traps, c.in_agent});
  }
  if (*trap_) {
    o.trap_ns_per_hit = (*trap_)->ns_per_hit;
    o.trap_source = (*trap_)->cached ? "cached for this boot" : "measured";
  } else {
    o.trap_source = trap_->error().message;
  }
  rusage self{};
  getrusage(RUSAGE_SELF, &self);  // every thread of eacgm's
  o.agent_cpu_s = static_cast<double>(self.ru_utime.tv_sec + self.ru_stime.tv_sec) +
                  static_cast<double>(self.ru_utime.tv_usec + self.ru_stime.tv_usec) / 1e6;
  o.agent_peak_rss_bytes = static_cast<uint64_t>(self.ru_maxrss) * 1024;
  return o;
}

}  // namespace eacgm
