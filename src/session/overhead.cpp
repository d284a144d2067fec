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

nlohmann::json TracingOverhead::to_json(double duration_s) const {
  using nlohmann::json;
  std::map<std::string, uint64_t> hits, bpf_ns;
  uint64_t job_bpf_ns = 0, agent_bpf_ns = 0;
  for (const Programs& p : programs) {
    if (p.in_agent) {
      agent_bpf_ns += p.bpf_ns;
      continue;
    }
    hits[p.group] += p.hits;
    bpf_ns[p.group] += p.bpf_ns;
    job_bpf_ns += p.bpf_ns;
  }
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
  };
  if (programs_problem) out["problem"] = *programs_problem;
  return out;
}

std::string TracingOverhead::report_line(double duration_s) const {
  std::string cost;
  if (const std::optional<double> added = estimated_added_s()) {
    uint64_t hits = 0;
    for (const Programs& p : programs) hits += p.in_agent ? 0 : p.hits;
    const std::optional<double> pct = estimated_slowdown_pct(duration_s);
    cost = fmt::format("~{:.1f} ms added to the job{} ({} probe hits, {:.0f} ns trap each)",
                       *added * 1e3, pct ? fmt::format(" ({:.2f} %)", *pct) : "", hits,
                       *trap_ns_per_hit);
  } else {
    cost = fmt::format("cost to the job unknown ({})",
                       programs_problem ? *programs_problem : "trap cost " + trap_source);
  }
  return fmt::format("overhead: {}; eacgm used {:.2f} s of CPU, {:.0f} MiB at most", cost,
                     agent_cpu_s, static_cast<double>(agent_peak_rss_bytes) / (1 << 20));
}

}  // namespace eacgm
