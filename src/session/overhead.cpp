#include "session/overhead.h"

#include <fmt/format.h>

#include <map>

namespace eacgm {

std::optional<double> TracingOverhead::estimated_added_s() const {
  if (programs_problem || !trap_ns_per_hit) return std::nullopt;
  double ns = 0;
  for (const Programs& p : programs) {
    if (p.in_agent) continue;
    ns += static_cast<double>(p.bpf_ns);
    if (p.traps) ns += static_cast<double>(p.hits) * *trap_ns_per_hit;
  }
  return ns / 1e9;
}

std::optional<double> TracingOverhead::estimated_slowdown_pct(double duration_s) const {
  const std::optional<double> added = estimated_added_s();
  if (!added || duration_s <= *added) return std::nullopt;
  return 100.0 * *added / (duration_s - *added);
}

std::map<std::string, TracingOverhead::LayerCost> TracingOverhead::job_layers() const {
  std::map<std::string, LayerCost> out;
  for (const Programs& p : programs) {
    if (p.in_agent) continue;
    LayerCost& c = out[p.group];
    c.hits += p.hits;
    c.bpf_ns += p.bpf_ns;
    c.traps |= p.traps;
  }
  return out;
}

double TracingOverhead::ns_per_hit(const LayerCost& layer) const {
  if (layer.hits == 0) return 0;
  return static_cast<double>(layer.bpf_ns) / static_cast<double>(layer.hits) +
         (layer.traps ? trap_ns_per_hit.value_or(0) : 0);
}

nlohmann::json TracingOverhead::to_json(double duration_s) const {
  using nlohmann::json;
  std::map<std::string, uint64_t> hits, bpf_ns;
  uint64_t job_bpf_ns = 0, agent_bpf_ns = 0;
  for (const auto& [layer, c] : job_layers()) {
    hits[layer] = c.hits;
    bpf_ns[layer] = c.bpf_ns;
    job_bpf_ns += c.bpf_ns;
  }
  for (const Programs& p : programs) agent_bpf_ns += p.in_agent ? p.bpf_ns : 0;
  auto maybe = [](const std::optional<double>& v) { return v ? json(*v) : json(nullptr); };
  json out = {
      {"probe_hits", programs_problem ? json(nullptr) : json(hits)},
      {"bpf_ns", programs_problem ? json(nullptr) : json(job_bpf_ns)},
      {"bpf_ns_by_layer", programs_problem ? json(nullptr) : json(bpf_ns)},
      {"sampler_bpf_ns", programs_problem ? json(nullptr) : json(agent_bpf_ns)},
      {"trap_ns_per_hit", maybe(trap_ns_per_hit)},
      {"trap_ns_source", trap_source},
      {"estimated_added_s", maybe(estimated_added_s())},
      {"estimated_slowdown_pct", maybe(estimated_slowdown_pct(duration_s))},
      {"agent_cpu_s", agent_cpu_s},
      {"agent_peak_rss_bytes", agent_peak_rss_bytes},
      {"target_pauses", pauses.count},
      {"target_paused_s", static_cast<double>(pauses.total_ns) / 1e9},
      {"target_longest_pause_ms", static_cast<double>(pauses.longest_ns) / 1e6},
  };
  if (programs_problem) out["problem"] = *programs_problem;
  out["budget"] = nullptr;
  if (duty_cycle) {
    json untraced = json::array();
    for (const auto& [from, to] : duty_cycle->untraced) {
      untraced.push_back({static_cast<double>(from) / 1e9, static_cast<double>(to) / 1e9});
    }
    out["budget"] = {{"budget_pct", 100 * duty_cycle->budget},
                     {"traced_fraction", duty_cycle->traced_fraction},
                     {"on_phases", duty_cycle->on_phases},
                     {"slowdown_while_traced_pct", 100 * duty_cycle->slowdown_while_traced},
                     {"always_traced_slowdown_pct", 100 * duty_cycle->always_traced_slowdown},
                     {"estimated_slowdown_pct", 100 * duty_cycle->estimated_slowdown},
                     {"sampled_count_scale", duty_cycle->count_scale},
                     {"untraced_s", std::move(untraced)}};
  }
  return out;
}

std::string TracingOverhead::report_line(double duration_s) const {
  std::string cost;
  if (const std::optional<double> added = estimated_added_s()) {
    uint64_t hits = 0;
    for (const auto& [layer, c] : job_layers()) hits += c.hits;
    const std::optional<double> pct = estimated_slowdown_pct(duration_s);
    cost = fmt::format("~{:.1f} ms added to the job{} ({} probe hits, {:.0f} ns trap each)",
                       *added * 1e3, pct ? fmt::format(" ({:.2f} %)", *pct) : "", hits,
                       *trap_ns_per_hit);
  } else {
    cost = fmt::format("cost to the job unknown ({})",
                       programs_problem ? *programs_problem : "trap cost " + trap_source);
  }
  const std::string paused =
      pauses.count == 0
          ? ""
          : fmt::format("; stopped {} times while eacgm probed what it loaded, {:.1f} ms in all",
                        pauses.count, static_cast<double>(pauses.total_ns) / 1e6);
  const std::string budget =
      duty_cycle ? fmt::format(
                       "; under a budget of {:.3g} %, the frequent calls were traced {:.0f} % "
                       "of the time (counts of those are sampled)",
                       100 * duty_cycle->budget, 100 * duty_cycle->traced_fraction)
                 : "";
  return fmt::format("overhead: {}{}{}; eacgm used {:.2f} s of CPU, {:.0f} MiB at most", cost,
                     paused, budget, agent_cpu_s,
                     static_cast<double>(agent_peak_rss_bytes) / (1 << 20));
}

}  // namespace eacgm
