#include "serve/serve_metrics.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "common/clock.h"
#include "common/json_text.h"
#include "layers/nccl/collectives.h"

namespace eacgm {
namespace {

std::string optional_number(const std::optional<int>& n) { return n ? std::to_string(*n) : ""; }

// A reading in Prometheus's base units (eacgm_gpu_temperature_celsius), and under the name it had
// before (eacgm_gpu_temperature_c), kept for one release so that dashboards and rules can move.
std::string gpu_family(const GpuMetricInfo& info) {
  return fmt::format("eacgm_gpu_{}", info.prometheus);
}
std::string deprecated_gpu_family(const GpuMetricInfo& info) {
  return info.key == info.prometheus ? std::string() : fmt::format("eacgm_gpu_{}", info.key);
}

// The base unit, in words, from the name's suffix (the Prometheus naming convention).
std::string_view base_unit_words(std::string_view name) {
  static constexpr std::pair<std::string_view, std::string_view> kUnits[] = {
      {"_ratio", "a ratio from 0 to 1"},
      {"_celsius", "degrees Celsius"},
      {"_watts", "watts"},
      {"_hertz", "hertz"},
      {"_bytes_per_second", "bytes per second"},
      {"_bytes", "bytes"},
  };
  for (auto [suffix, words] : kUnits) {
    if (name.ends_with(suffix)) return words;
  }
  return "";
}

}  // namespace

ServeMetrics::ServeMetrics(Options options, std::string version)
    : options_(options), version_(std::move(version)) {}

std::vector<MetricFamilyInfo> ServeMetrics::families() {
  std::vector<MetricFamilyInfo> out = {
      {"eacgm_build_info", "gauge", "The eacgm version serving these metrics (always 1)."},
      {"eacgm_layer_active", "gauge",
       "1 when the layer traces something (its library was found, NVML loads), else 0."},
      {"eacgm_events_total", "counter", "Events decoded from the ring buffer."},
      {"eacgm_events_dropped_total", "counter",
       "Events lost because the ring buffer was full (failed reservations, all CPUs)."},
      {"eacgm_processes_traced", "gauge", "Processes being traced now."},
      {"eacgm_calls_total", "counter", "Finished calls, by layer and API or collective."},
      {"eacgm_call_errors_total", "counter", "Calls that returned an error status."},
      {"eacgm_call_bytes_total", "counter",
       "Bytes the calls moved or allocated (successful calls only)."},
      {"eacgm_call_duration_seconds", "histogram", "Call latency, by layer and API or collective."},
      {"eacgm_collective_duration_seconds", "histogram",
       "NCCL collective latency of each rank (the rank from its communicator)."},
      {"eacgm_nccl_rank_communicator_size", "gauge",
       "Ranks in an NCCL communicator, one series per rank of it traced here: the ranks each "
       "node sees, for verdicts across nodes."},
      {"eacgm_nccl_rank_entered_seq", "gauge",
       "Sequence number of the latest collective this rank entered on the communicator (1: the "
       "first after its creation); absent while the numbering is unknown."},
      {"eacgm_nccl_rank_completed_seq", "gauge",
       "Sequence number of the latest collective this rank returned from."},
      {"eacgm_nccl_rank_inside_seconds", "gauge",
       "How long the rank has been inside its current collective call (0 when it is in none), "
       "on this node's clock."},
      {"eacgm_nccl_rank_progress_age_seconds", "gauge",
       "Seconds since the rank last entered or returned from a collective on the communicator, "
       "on this node's clock."},
      {"eacgm_nccl_rank_collective_seconds_total", "counter",
       "Time the rank spent inside collective calls that returned: with the count, what it "
       "waits per collective (the straggler waits least)."},
      {"eacgm_nccl_rank_collectives_total", "counter", "Collective calls the rank returned from."},
      {"eacgm_process_info", "gauge",
       "A traced process's identity: rank, job and cgroup (always 1)."},
      {"eacgm_process_device_memory_bytes", "gauge",
       "Device memory a process allocated and has not freed (traced cudaMalloc/cudaFree)."},
      {"eacgm_anomalies_total", "counter", "Anomalies detected, by kind and layer."},
      {"eacgm_anomaly_timestamp_seconds", "gauge",
       "Unix time of the latest anomaly of this kind for this rank or process (recent ones)."},
      {"eacgm_gpu_memory_total_bytes", "gauge", "Device memory of each GPU (NVML)."},
      {"eacgm_probe_hits_total", "counter",
       "Runs of eacgm's BPF programs, by layer, in every process that ran a probed function "
       "(the kernel's BPF statistics)."},
      {"eacgm_probe_bpf_seconds_total", "counter",
       "In-kernel run time of eacgm's BPF programs, by layer (the python sampler's apart)."},
      {"eacgm_probe_trap_seconds", "gauge",
       "What one uprobe hit costs a traced process in traps on this machine, measured by eacgm."},
      {"eacgm_estimated_added_seconds_total", "counter",
       "Time the traced processes lost to tracing, estimated: traps and program run time."},
      {"eacgm_process_estimated_added_seconds_total", "counter",
       "The same for one traced process, from its traced calls."},
      {"eacgm_agent_cpu_seconds_total", "counter", "CPU time eacgm itself used, all threads."},
      {"eacgm_agent_peak_resident_bytes", "gauge", "eacgm's own peak resident memory."},
      {"eacgm_target_pauses_total", "counter",
       "Times eacgm stopped a target: to probe a library it loaded, or as it unwound."},
      {"eacgm_target_paused_seconds_total", "counter",
       "Time targets spent stopped by eacgm, summed over stops."},
      {"eacgm_gpu_events_total", "counter", "XID and ECC events each GPU reported (NVML)."},
      {"eacgm_overhead_budget_ratio", "gauge",
       "--overhead-budget: the share of each traced process's time tracing may cost it."},
      {"eacgm_traced_ratio", "gauge",
       "--overhead-budget: the share of the time the frequent calls (launches, copies, syncs, "
       "torch operators) were traced; their call counts are sampled by it."},
  };
  for (const GpuMetricInfo& info : gpu_metrics()) {
    out.push_back({gpu_family(info), "gauge",
                   fmt::format("Latest NVML reading of each GPU: {}, in {}.", info.label,
                               base_unit_words(info.prometheus))});
    if (const std::string old = deprecated_gpu_family(info); !old.empty()) {
      out.push_back({old, "gauge",
                     fmt::format("deprecated: use {} (this one is in {}, and goes in the next "
                                 "release).",
                                 gpu_family(info), info.unit)});
    }
  }
  return out;
}

ServeMetrics::ApiStats& ServeMetrics::api(const CallRecord& call) {
  if (auto it = by_spec_.find(call.spec); it != by_spec_.end()) return *it->second;
  auto names = names_.try_emplace(call.layer(), options_.max_names_per_layer).first;
  const std::string label(names->second.admit(call.name()));
  auto [it, fresh] = apis_.try_emplace({call.layer(), label});
  if (fresh) {
    it->second.layer = call.layer();
    it->second.name = label;
  }
  by_spec_.emplace(call.spec, &it->second);
  return it->second;
}

void ServeMetrics::on_call(const CallRecord& call) {
  if (call.inner) return;  // the runtime call around it is the one call (a launch counted once)
  std::lock_guard lock(mu_);
  if (auto it = calls_by_process_.find(call.pid); it != calls_by_process_.end()) {
    ++it->second[call.spec->layer];
  } else if (calls_by_process_.size() < options_.max_processes) {
    ++calls_by_process_[call.pid][call.spec->layer];
  }
  ApiStats& stats = api(call);
  ++stats.calls;
  stats.latency.observe(call.duration_ns);
  if (call.failed()) {
    ++stats.errors;
  } else {
    stats.bytes += call.bytes();
  }
  if (call.collective && call.spec->role == CallRole::kCollective) {
    auto it = collectives_.find(call.pid);
    if (it == collectives_.end()) {
      if (collectives_.size() >= options_.max_processes) return;
      it = collectives_.emplace(call.pid, RankCollectives{}).first;
    }
    it->second.rank = call.collective->rank;
    it->second.latency.observe(call.duration_ns);
  }
  if (call.spec->role == CallRole::kCollective) {
    if (NcclRank* r = nccl_rank(call)) {
      if (call.collective) r->completed_seq = call.collective->seq;
      r->inside_since_ns.reset();
      r->progress_ns = std::max(r->progress_ns, call.start_ns + call.duration_ns);
      ++r->collectives;
      r->inside_ns += call.duration_ns;
    }
  }
}

ServeMetrics::NcclRank* ServeMetrics::nccl_rank(const CallRecord& call) {
  // The communicator, from its creation or the ranks' alignment; else the world communicator
  // assumed from the process's RANK and WORLD_SIZE, numbered nowhere yet.
  std::string comm;
  int rank = -1, nranks = 0;
  if (call.collective) {
    comm = call.collective->comm_id;
    rank = call.collective->rank;
    nranks = call.collective->nranks;
  } else if (auto p = processes_.find(call.pid);
             p != processes_.end() && p->second.rank && p->second.world_size) {
    comm = kAssumedWorldComm;
    rank = *p->second.rank;
    nranks = *p->second.world_size;
  } else {
    return nullptr;
  }
  auto it = nccl_ranks_.find({call.pid, comm});
  if (it == nccl_ranks_.end()) {
    // Bounded: a process that splits communicators without end gets its first few followed.
    const auto first = nccl_ranks_.lower_bound({call.pid, ""});
    const auto of_pid =
        static_cast<size_t>(std::distance(first, nccl_ranks_.lower_bound({call.pid + 1, ""})));
    if (of_pid >= options_.max_communicators_per_process ||
        nccl_ranks_.size() >= options_.max_processes * options_.max_communicators_per_process) {
      return nullptr;
    }
    it = nccl_ranks_.emplace(NcclRankKey{call.pid, comm}, NcclRank{}).first;
  }
  it->second.rank = rank;
  it->second.nranks = nranks;
  return &it->second;
}

void ServeMetrics::on_entry(const CallRecord& entry) {
  if (entry.spec->role != CallRole::kCollective) return;
  std::lock_guard lock(mu_);
  NcclRank* r = nccl_rank(entry);
  if (!r) return;
  if (entry.collective) r->entered_seq = entry.collective->seq;
  r->inside_since_ns = entry.start_ns;
  r->progress_ns = std::max(r->progress_ns, entry.start_ns);
}

void ServeMetrics::on_gpu_sample(const GpuSample& sample) {
  std::lock_guard lock(mu_);
  GpuDevice& gpu = gpus_[sample.device];
  gpu.values = sample.values;
  if (sample.memory_total_bytes) gpu.memory_total_bytes = sample.memory_total_bytes;
}

void ServeMetrics::on_gpu_event(const GpuEvent& event) {
  std::lock_guard lock(mu_);
  ++gpus_[event.device].events[std::string(gpu_event_kind_name(event.kind))];
}

void ServeMetrics::on_anomaly(const Anomaly& anomaly, double unix_time_s) {
  std::lock_guard lock(mu_);
  ++anomaly_counts_[{anomaly.kind, std::string(layer_name(anomaly.layer))}];
  std::string job;
  if (anomaly.pid) {
    if (auto it = processes_.find(*anomaly.pid); it != processes_.end()) job = it->second.job_id;
  }
  recent_.push_back({anomaly, std::move(job), unix_time_s});
  while (recent_.size() > options_.max_anomalies) recent_.pop_front();
}

void ServeMetrics::update_process(ServedProcess process) {
  std::lock_guard lock(mu_);
  const uint32_t pid = process.pid;
  processes_.insert_or_assign(pid, std::move(process));
}

void ServeMetrics::forget_process(uint32_t pid) {
  std::lock_guard lock(mu_);
  processes_.erase(pid);
  collectives_.erase(pid);
  calls_by_process_.erase(pid);
  nccl_ranks_.erase(nccl_ranks_.lower_bound({pid, ""}), nccl_ranks_.lower_bound({pid + 1, ""}));
}

void ServeMetrics::set_overhead(TracingOverhead overhead) {
  std::lock_guard lock(mu_);
  overhead_ = std::move(overhead);
}

template <typename Family>
void ServeMetrics::render_overhead(Exposition& out, Family& family) const {
  for (const char* name :
       {"eacgm_probe_hits_total", "eacgm_probe_bpf_seconds_total", "eacgm_probe_trap_seconds",
        "eacgm_estimated_added_seconds_total", "eacgm_process_estimated_added_seconds_total",
        "eacgm_agent_cpu_seconds_total", "eacgm_agent_peak_resident_bytes",
        "eacgm_target_pauses_total", "eacgm_target_paused_seconds_total",
        "eacgm_overhead_budget_ratio", "eacgm_traced_ratio"}) {
    family(name);
  }
  if (!overhead_) return;
  const TracingOverhead& o = *overhead_;
  const std::map<std::string, TracingOverhead::LayerCost> by_layer = o.job_layers();
  if (!o.programs_problem) {
    for (const auto& [layer, c] : by_layer) {
      out.sample("eacgm_probe_hits_total", {{"layer", layer}}, static_cast<double>(c.hits));
      out.sample("eacgm_probe_bpf_seconds_total", {{"layer", layer}},
                 static_cast<double>(c.bpf_ns) / 1e9);
    }
  }
  if (o.trap_ns_per_hit) out.sample("eacgm_probe_trap_seconds", {}, *o.trap_ns_per_hit / 1e9);
  if (const std::optional<double> added = o.estimated_added_s()) {
    out.sample("eacgm_estimated_added_seconds_total", {}, *added);
    for (const auto& [pid, calls] : calls_by_process_) {
      if (!processes_.contains(pid)) continue;  // live, identified processes only
      double ns = 0;
      for (const auto& [layer, n] : calls) {
        auto c = by_layer.find(std::string(layer_name(layer)));
        if (c == by_layer.end()) continue;
        ns += 2.0 * static_cast<double>(n) * o.ns_per_hit(c->second);  // an entry and a return
      }
      out.sample("eacgm_process_estimated_added_seconds_total", process_labels(pid), ns / 1e9);
    }
  }
  out.sample("eacgm_agent_cpu_seconds_total", {}, o.agent_cpu_s);
  out.sample("eacgm_agent_peak_resident_bytes", {}, static_cast<double>(o.agent_peak_rss_bytes));
  out.sample("eacgm_target_pauses_total", {}, static_cast<double>(o.pauses.count));
  out.sample("eacgm_target_paused_seconds_total", {}, static_cast<double>(o.pauses.total_ns) / 1e9);
  if (o.duty_cycle) {
    out.sample("eacgm_overhead_budget_ratio", {}, o.duty_cycle->budget);
    out.sample("eacgm_traced_ratio", {}, o.duty_cycle->traced_fraction);
  }
}

void ServeMetrics::set_event_counts(uint64_t recorded, uint64_t dropped) {
  std::lock_guard lock(mu_);
  events_ = recorded;
  dropped_ = dropped;
}

void ServeMetrics::set_layer_active(Layer layer, bool active) {
  std::lock_guard lock(mu_);
  layers_[layer] = active;
}

size_t ServeMetrics::processes() const {
  std::lock_guard lock(mu_);
  return processes_.size();
}

Labels ServeMetrics::process_labels(uint32_t pid) const {
  Labels labels = {{"pid", std::to_string(pid)}};
  auto it = processes_.find(pid);
  labels.emplace_back("rank", it == processes_.end() ? "" : optional_number(it->second.rank));
  labels.emplace_back("job_id", it == processes_.end() ? "" : it->second.job_id);
  return labels;
}

std::string ServeMetrics::render() const { return render(monotonic_ns()); }

std::string ServeMetrics::render(uint64_t now_ns) const {
  std::lock_guard lock(mu_);
  std::map<std::string, MetricFamilyInfo> info;
  for (MetricFamilyInfo& f : families()) info.emplace(f.name, std::move(f));
  Exposition out;
  auto family = [&](const std::string& name) {
    const MetricFamilyInfo& f = info.at(name);
    out.family(f.name, f.type, f.help);
  };

  family("eacgm_build_info");
  out.sample("eacgm_build_info", {{"version", version_}}, 1);
  family("eacgm_layer_active");
  for (const auto& [layer, active] : layers_) {
    out.sample("eacgm_layer_active", {{"layer", std::string(layer_name(layer))}}, active ? 1 : 0);
  }
  family("eacgm_events_total");
  out.sample("eacgm_events_total", {}, static_cast<double>(events_));
  family("eacgm_events_dropped_total");
  out.sample("eacgm_events_dropped_total", {}, static_cast<double>(dropped_));
  family("eacgm_processes_traced");
  out.sample("eacgm_processes_traced", {}, static_cast<double>(processes_.size()));

  auto api_labels = [](const ApiStats& s) {
    return Labels{{"layer", std::string(layer_name(s.layer))}, {"api", s.name}};
  };
  family("eacgm_calls_total");
  for (const auto& [key, s] : apis_) out.sample("eacgm_calls_total", api_labels(s), s.calls);
  family("eacgm_call_errors_total");
  for (const auto& [key, s] : apis_) out.sample("eacgm_call_errors_total", api_labels(s), s.errors);
  family("eacgm_call_bytes_total");
  for (const auto& [key, s] : apis_) out.sample("eacgm_call_bytes_total", api_labels(s), s.bytes);
  family("eacgm_call_duration_seconds");
  for (const auto& [key, s] : apis_) {
    out.histogram("eacgm_call_duration_seconds", api_labels(s), s.latency);
  }
  family("eacgm_collective_duration_seconds");
  for (const auto& [pid, c] : collectives_) {
    Labels labels = process_labels(pid);
    labels[1].second = std::to_string(c.rank);  // the communicator's word on the rank
    out.histogram("eacgm_collective_duration_seconds", labels, c.latency);
  }

  {
    // Per rank of each communicator, of live processes only.
    auto labels = [this](const NcclRankKey& key, const NcclRank& r) {
      Labels l = process_labels(key.first);
      l[1].second = std::to_string(r.rank);  // the communicator's word on the rank
      l.emplace_back("communicator", key.second);
      return l;
    };
    auto seconds_since = [now_ns](uint64_t then_ns) {
      return now_ns > then_ns ? static_cast<double>(now_ns - then_ns) / 1e9 : 0.0;
    };
    auto each = [&](const char* name, auto value) {
      family(name);
      for (const auto& [key, r] : nccl_ranks_) {
        if (!processes_.contains(key.first)) continue;
        if (const std::optional<double> v = value(r)) out.sample(name, labels(key, r), *v);
      }
    };
    using V = std::optional<double>;
    each("eacgm_nccl_rank_communicator_size", [](const NcclRank& r) -> V { return r.nranks; });
    each("eacgm_nccl_rank_entered_seq", [](const NcclRank& r) -> V {
      return r.entered_seq ? V(static_cast<double>(*r.entered_seq)) : std::nullopt;
    });
    each("eacgm_nccl_rank_completed_seq", [](const NcclRank& r) -> V {
      return r.completed_seq ? V(static_cast<double>(*r.completed_seq)) : std::nullopt;
    });
    each("eacgm_nccl_rank_inside_seconds", [&](const NcclRank& r) -> V {
      return r.inside_since_ns ? seconds_since(*r.inside_since_ns) : 0.0;
    });
    each("eacgm_nccl_rank_progress_age_seconds",
         [&](const NcclRank& r) -> V { return seconds_since(r.progress_ns); });
    each("eacgm_nccl_rank_collective_seconds_total",
         [](const NcclRank& r) -> V { return static_cast<double>(r.inside_ns) / 1e9; });
    each("eacgm_nccl_rank_collectives_total",
         [](const NcclRank& r) -> V { return static_cast<double>(r.collectives); });
  }

  family("eacgm_process_info");
  size_t n = 0;
  for (const auto& [pid, p] : processes_) {
    if (n++ >= options_.max_processes) break;
    out.sample("eacgm_process_info",
               {{"pid", std::to_string(pid)},
                {"comm", p.comm},
                {"rank", optional_number(p.rank)},
                {"local_rank", optional_number(p.local_rank)},
                {"world_size", optional_number(p.world_size)},
                {"job_id", p.job_id},
                {"cgroup", p.cgroup}},
               1);
  }
  family("eacgm_process_device_memory_bytes");
  n = 0;
  for (const auto& [pid, p] : processes_) {
    if (n++ >= options_.max_processes) break;
    out.sample("eacgm_process_device_memory_bytes", process_labels(pid),
               static_cast<double>(p.device_memory_bytes));
  }

  family("eacgm_anomalies_total");
  for (const auto& [key, count] : anomaly_counts_) {
    out.sample("eacgm_anomalies_total", {{"kind", key.first}, {"layer", key.second}},
               static_cast<double>(count));
  }
  family("eacgm_anomaly_timestamp_seconds");
  {
    // One series per (kind, layer, rank, pid, job): the latest time it was reported.
    std::map<std::vector<std::string>, double> latest;
    for (const RecentAnomaly& r : recent_) {
      const Anomaly& a = r.anomaly;
      std::vector<std::string> key = {a.kind, std::string(layer_name(a.layer)),
                                      optional_number(a.rank), a.pid ? std::to_string(*a.pid) : "",
                                      r.job_id};
      double& t = latest[std::move(key)];
      t = std::max(t, r.unix_time_s);
    }
    for (const auto& [k, t] : latest) {
      out.sample("eacgm_anomaly_timestamp_seconds",
                 {{"kind", k[0]}, {"layer", k[1]}, {"rank", k[2]}, {"pid", k[3]}, {"job_id", k[4]}},
                 t);
    }
  }

  render_overhead(out, family);

  family("eacgm_gpu_memory_total_bytes");
  for (const auto& [device, gpu] : gpus_) {
    if (gpu.memory_total_bytes) {
      out.sample("eacgm_gpu_memory_total_bytes", {{"device", std::to_string(device)}},
                 static_cast<double>(*gpu.memory_total_bytes));
    }
  }
  family("eacgm_gpu_events_total");
  for (const auto& [device, gpu] : gpus_) {
    for (const auto& [kind, count] : gpu.events) {
      out.sample("eacgm_gpu_events_total", {{"device", std::to_string(device)}, {"kind", kind}},
                 static_cast<double>(count));
    }
  }
  for (const GpuMetricInfo& m : gpu_metrics()) {
    const std::string name = gpu_family(m);
    family(name);
    for (const auto& [device, gpu] : gpus_) {
      if (const auto& v = gpu.values[static_cast<size_t>(m.metric)]) {
        out.sample(name, {{"device", std::to_string(device)}}, to_base_unit(m, *v));
      }
    }
  }
  for (const GpuMetricInfo& m : gpu_metrics()) {
    const std::string old = deprecated_gpu_family(m);
    if (old.empty()) continue;
    family(old);
    for (const auto& [device, gpu] : gpus_) {
      if (const auto& v = gpu.values[static_cast<size_t>(m.metric)]) {
        out.sample(old, {{"device", std::to_string(device)}}, *v);
      }
    }
  }
  return out.text();
}

std::string ServeMetrics::anomalies_json() const {
  std::lock_guard lock(mu_);
  nlohmann::json list = nlohmann::json::array();
  for (const RecentAnomaly& r : recent_) {
    const Anomaly& a = r.anomaly;
    list.push_back({{"kind", a.kind},
                    {"layer", layer_name(a.layer)},
                    {"pid", a.pid ? nlohmann::json(*a.pid) : nlohmann::json()},
                    {"rank", a.rank ? nlohmann::json(*a.rank) : nlohmann::json()},
                    {"job_id", r.job_id},
                    {"time", r.unix_time_s},
                    {"t_s", a.t_s},
                    {"score", a.score},
                    {"evidence", a.evidence},
                    {"message", a.message},
                    {"suggestion", a.suggestion}});
  }
  return json_text(nlohmann::json{{"anomalies", std::move(list)}}, 2) + "\n";
}

}  // namespace eacgm
