#include "layers/gpu/gpu_monitor.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>

namespace eacgm {
namespace {

using nlohmann::json;

// A whole number as a JSON integer (bytes, MHz, °C read as integers stay
// exact and readable); anything else as a double.
json number(double v) {
  if (std::isfinite(v) && std::floor(v) == v && std::fabs(v) < 9.0e15) {
    return v < 0 ? json(static_cast<int64_t>(v)) : json(static_cast<uint64_t>(v));
  }
  return json(v);
}

std::string device_label(uint32_t index, const std::string& name) {
  return name.empty() ? fmt::format("GPU {}", index) : fmt::format("GPU {} ({})", index, name);
}

std::string xid_suggestion(uint64_t xid, uint32_t device) {
  switch (xid) {
    case 13:
    case 31:
    case 43:
    case 45:
      return fmt::format(
          "usually the application: an illegal memory access or a faulting kernel in the process "
          "using GPU {}; rerun it under compute-sanitizer",
          device);
    case 48:
    case 63:
    case 64:
    case 92:
    case 94:
    case 95:
      return "device memory errors: drain the node and check `nvidia-smi -q -d ECC,ROW_REMAPPER`; "
             "an uncorrectable error needs a GPU reset before the GPU is trusted again";
    case 74:
      return "NVLink error: check `nvidia-smi nvlink -s` and the fabric; collectives over this "
             "link may slow down or hang";
    case 38:
    case 61:
    case 62:
    case 79:
    case 119:
    case 120:
      return "the GPU or its driver failed: check dmesg, the PCIe link, power and cooling; the "
             "GPU needs a reset (or the node a reboot) before it is used again";
    default:
      return fmt::format(
          "look XID {} up in NVIDIA's XID catalog and read the driver's full message in the "
          "kernel log (dmesg)",
          xid);
  }
}

}  // namespace

void MetricStats::add(double value) {
  if (count == 0) {
    min = max = value;
  } else {
    min = std::min(min, value);
    max = std::max(max, value);
  }
  sum += value;
  ++count;
}

nlohmann::json MetricStats::json() const {
  return {{"min", number(min)}, {"max", number(max)}, {"mean", number(mean())}};
}

std::optional<ThrottleDetector::Episode> ThrottleDetector::observe(uint64_t ts_ns,
                                                                   uint64_t reasons) {
  const uint64_t bits = reasons & kThrottleReasons;
  if (bits == 0) {
    start_ns_.reset();
    reasons_ = 0;
    reported_ = false;
    return std::nullopt;
  }
  if (!start_ns_) start_ns_ = ts_ns;
  reasons_ |= bits;
  if (reported_ || ts_ns < *start_ns_ || ts_ns - *start_ns_ < min_ns_) return std::nullopt;
  reported_ = true;
  return Episode{.start_ns = *start_ns_, .now_ns = ts_ns, .reasons = reasons_};
}

GpuMonitor::DeviceStats& GpuMonitor::device(uint32_t index) {
  auto [it, fresh] = devices_.try_emplace(index);
  if (fresh) {
    it->second.info.index = index;
    it->second.throttle = ThrottleDetector(options_.throttle_min_ns);
  }
  return it->second;
}

void GpuMonitor::add_device(Device info) {
  DeviceStats& d = device(info.index);
  d.info = std::move(info);
}

double GpuMonitor::t_s(uint64_t ns) const {
  return ns > session_start_ns_ ? (ns - session_start_ns_) / 1e9 : 0.0;
}

void GpuMonitor::on_sample(const GpuSample& s) {
  DeviceStats& d = device(s.device);
  ++d.samples;
  for (size_t m = 0; m < kGpuMetricCount; ++m) {
    if (s.values[m]) d.metrics[m].add(*s.values[m]);
  }
  if (s.memory_total_bytes) d.memory_total_bytes = s.memory_total_bytes;
  auto keep = [](const std::optional<double>& v, std::optional<double>& last) {
    if (v) last = v;
  };
  keep(s[GpuMetric::kTemperature], d.last_temperature);
  keep(s[GpuMetric::kPower], d.last_power);
  keep(s[GpuMetric::kPowerLimit], d.last_power_limit);
  keep(s[GpuMetric::kSmClock], d.last_sm_clock);

  // Time in each clock event reason: every interval belongs to the reasons
  // read at its start (sample and hold).
  if (d.last_reasons && s.ts_ns > d.last_ts_ns) {
    const double dt = (s.ts_ns - d.last_ts_ns) / 1e9;
    if (*d.last_reasons & kThrottleReasons) d.throttled_s += dt;
    for (const std::string& name : clock_event_reason_names(*d.last_reasons)) {
      d.reason_s[name] += dt;
    }
  }
  d.last_reasons = s.clock_event_reasons;
  d.last_ts_ns = s.ts_ns;
  if (s.clock_event_reasons) {
    if (auto episode = d.throttle.observe(s.ts_ns, *s.clock_event_reasons)) {
      throttle_anomaly(d, *episode);
    }
  }

  // ECC counts are sticky totals: only their growth during the session says
  // anything, and it is an event only where NVML's event set cannot tell us.
  if (s.ecc_corrected) {
    if (!d.ecc_corrected_first) d.ecc_corrected_first = s.ecc_corrected;
    d.ecc_corrected_last = s.ecc_corrected;
  }
  if (s.ecc_uncorrected) {
    const bool grew = d.ecc_uncorrected_last && *s.ecc_uncorrected > *d.ecc_uncorrected_last;
    if (grew && !(d.info.registered_events & 0x2)) {
      Anomaly a;
      a.kind = "ecc";
      a.layer = Layer::kGpu;
      a.t_s = t_s(s.ts_ns);
      a.evidence = {{"device", s.device},
                    {"uuid", d.info.uuid},
                    {"type", "uncorrected"},
                    {"source", "volatile ECC count"},
                    {"before", *d.ecc_uncorrected_last},
                    {"after", *s.ecc_uncorrected}};
      a.message = fmt::format("{}: {} new uncorrectable ECC error(s) in device memory",
                              device_label(s.device, d.info.name),
                              *s.ecc_uncorrected - *d.ecc_uncorrected_last);
      a.suggestion = xid_suggestion(48, s.device);
      pending_.push_back({std::move(a), s.device});
    }
    if (!d.ecc_uncorrected_first) d.ecc_uncorrected_first = s.ecc_uncorrected;
    d.ecc_uncorrected_last = s.ecc_uncorrected;
  }

  d.current_pids.clear();
  for (const GpuProcessSample& p : s.processes) {
    if (!p.traced) {
      d.other_pids.insert(p.pid);
      continue;
    }
    d.current_pids.push_back(p.pid);
    ProcessStats& ps = d.processes[p.pid];
    ++ps.samples;
    if (p.memory_used_bytes) ps.memory_used_bytes.add(static_cast<double>(*p.memory_used_bytes));
    if (p.sm_util_pct) ps.sm_util_pct.add(*p.sm_util_pct);
    if (p.memory_util_pct) ps.memory_util_pct.add(*p.memory_util_pct);
  }
}

void GpuMonitor::throttle_anomaly(const DeviceStats& d, const ThrottleDetector::Episode& e) {
  const std::vector<std::string> reasons = clock_event_reason_names(e.reasons);
  const bool thermal = e.reasons & kThermalReasons;
  const double lasted = (e.now_ns - e.start_ns) / 1e9;
  Anomaly a;
  a.kind = "throttle";
  a.layer = Layer::kGpu;
  a.t_s = t_s(e.start_ns);
  a.score = -lasted;
  a.evidence = {{"device", d.info.index}, {"uuid", d.info.uuid},
                {"reasons", reasons},     {"since_s", t_s(e.start_ns)},
                {"lasted_s", lasted},     {"threshold_s", options_.throttle_min_ns / 1e9}};
  if (d.last_temperature) a.evidence["temperature_c"] = number(*d.last_temperature);
  if (d.last_power) a.evidence["power_w"] = number(*d.last_power);
  if (d.last_power_limit) a.evidence["power_limit_w"] = number(*d.last_power_limit);
  if (d.last_sm_clock) a.evidence["sm_clock_mhz"] = number(*d.last_sm_clock);
  std::string reading;
  if (thermal && d.last_temperature) {
    reading = fmt::format(" at {} °C", *d.last_temperature);
  } else if (!thermal && d.last_power) {
    reading = d.last_power_limit
                  ? fmt::format(" at {:.0f} W of {:.0f} W", *d.last_power, *d.last_power_limit)
                  : fmt::format(" at {:.0f} W", *d.last_power);
  }
  a.message = fmt::format("{} has been {} throttled for {:.1f} s ({}){}",
                          device_label(d.info.index, d.info.name), thermal ? "thermally" : "power",
                          lasted, fmt::join(reasons, ", "), reading);
  a.suggestion =
      thermal ? "the GPU slows its clocks to protect itself from heat: check airflow, fans and "
                "inlet temperature, and compare with the node's other GPUs"
              : "the GPU runs at its power limit and lowers its clocks: check the limit "
                "(`nvidia-smi -q -d POWER`), whether it was capped, and the node's power supply";
  pending_.push_back({std::move(a), d.info.index});
}

void GpuMonitor::on_event(const GpuEvent& e) {
  DeviceStats& d = device(e.device);
  ++d.events[e.kind];
  const std::string who = device_label(e.device, d.info.name);
  Anomaly a;
  a.layer = Layer::kGpu;
  a.t_s = t_s(e.ts_ns);
  a.evidence = {{"device", e.device}, {"uuid", d.info.uuid}, {"source", "NVML event"}};
  if (e.kind == GpuEvent::Kind::kXid) {
    const std::string_view what = xid_description(e.code);
    a.kind = "xid";
    a.evidence["xid"] = e.code;
    if (!what.empty()) a.evidence["description"] = what;
    a.message = what.empty() ? fmt::format("{} reported XID {}", who, e.code)
                             : fmt::format("{} reported XID {}: {}", who, e.code, what);
    a.suggestion = xid_suggestion(e.code, e.device);
    d.xids.push_back({{"xid", e.code}, {"t_s", a.t_s}});
  } else {
    const bool uncorrected = e.kind == GpuEvent::Kind::kEccUncorrected;
    a.kind = "ecc";
    a.evidence["type"] = uncorrected ? "uncorrected" : "corrected";
    a.message = fmt::format("{} reported a {} ECC error in device memory", who,
                            uncorrected ? "double-bit (uncorrectable)" : "single-bit (corrected)");
    a.suggestion = uncorrected ? xid_suggestion(48, e.device)
                               : "corrected errors are harmless one by one; many of them announce "
                                 "a failing memory: watch `nvidia-smi -q -d ECC` on this node";
  }
  pending_.push_back({std::move(a), e.device});
}

std::vector<Anomaly> GpuMonitor::take_anomalies(const Session& session) {
  std::vector<Anomaly> out;
  for (Pending& p : pending_) {
    Anomaly& a = p.anomaly;
    const DeviceStats& d = device(p.device);
    // The traced processes on the device when it happened: the job that was hit.
    if (!d.current_pids.empty()) a.evidence["pids"] = d.current_pids;
    if (d.current_pids.size() == 1) {
      a.pid = d.current_pids.front();
      if (const ProcessInfo* proc = session.find_process(*a.pid)) a.rank = proc->rank;
    }
    out.push_back(std::move(a));
  }
  pending_.clear();
  return out;
}

nlohmann::json GpuMonitor::devices_json(
    const Session& session, const std::map<uint32_t, std::vector<std::string>>& unsupported) const {
  json devices = json::array();
  for (const auto& [index, d] : devices_) {
    json dev = {
        {"index", index}, {"name", d.info.name}, {"uuid", d.info.uuid}, {"samples", d.samples}};
    for (const GpuMetricInfo& m : gpu_metrics()) {
      const MetricStats& st = d.metrics[static_cast<size_t>(m.metric)];
      if (st.count > 0) dev[std::string(m.key)] = st.json();
    }
    if (d.memory_total_bytes) dev["memory_total_bytes"] = *d.memory_total_bytes;
    json throttle = {{"throttled_s", d.throttled_s}};
    json reasons = json::object();
    for (const auto& [name, seconds] : d.reason_s) reasons[name] = seconds;
    throttle["reasons_s"] = std::move(reasons);
    dev["clock_events"] = std::move(throttle);
    if (d.ecc_corrected_last || d.ecc_uncorrected_last) {
      json ecc = json::object();
      if (d.ecc_corrected_last) {
        ecc["corrected"] = *d.ecc_corrected_last;
        ecc["corrected_during_session"] = *d.ecc_corrected_last - *d.ecc_corrected_first;
      }
      if (d.ecc_uncorrected_last) {
        ecc["uncorrected"] = *d.ecc_uncorrected_last;
        ecc["uncorrected_during_session"] = *d.ecc_uncorrected_last - *d.ecc_uncorrected_first;
      }
      dev["ecc_errors"] = std::move(ecc);
    }
    json events = json::object();
    for (const auto& [kind, n] : d.events) events[std::string(gpu_event_kind_name(kind))] = n;
    dev["events"] = std::move(events);
    if (!d.xids.empty()) dev["xids"] = d.xids;
    json procs = json::array();
    for (const auto& [pid, ps] : d.processes) {
      json p = {{"pid", pid}, {"samples", ps.samples}};
      if (const ProcessInfo* info = session.find_process(pid)) {
        p["comm"] = info->comm;
        p["rank"] = info->rank ? json(*info->rank) : json(nullptr);
      }
      if (ps.memory_used_bytes.count) p["memory_used_bytes"] = ps.memory_used_bytes.json();
      if (ps.sm_util_pct.count) p["sm_util_pct"] = ps.sm_util_pct.json();
      if (ps.memory_util_pct.count) p["memory_util_pct"] = ps.memory_util_pct.json();
      procs.push_back(std::move(p));
    }
    dev["processes"] = std::move(procs);
    dev["other_processes"] = d.other_pids.size();
    auto missing = unsupported.find(index);
    dev["unsupported"] = missing != unsupported.end() ? json(missing->second) : json::array();
    devices.push_back(std::move(dev));
  }
  return devices;
}

}  // namespace eacgm
