#include "layers/gpu/gpu_report.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace eacgm {
namespace {

using nlohmann::json;

std::string gib(double bytes) { return fmt::format("{:.1f} GiB", bytes / (1ull << 30)); }

double get(const json& stats, const char* key) {
  return stats.contains(key) && stats[key].is_number() ? stats[key].get<double>() : 0.0;
}

}  // namespace

std::vector<std::string> gpu_report_lines(const Session& session) {
  std::vector<std::string> out;
  auto it = session.layers.find(Layer::kGpu);
  if (it == session.layers.end()) return out;
  const LayerState& state = it->second;
  if (state.status != LayerStatus::kActive) {
    out.push_back(fmt::format("\n[gpu] {}{}", layer_status_name(state.status),
                              state.reason.empty() ? "" : ": " + state.reason));
    return out;
  }
  const json& x = state.extra;
  const json devices = x.value("devices", json::array());
  out.push_back(fmt::format("\n[gpu] NVML driver {}, {} GPU{}, sampled at {} Hz",
                            x.value("driver", std::string("?")), devices.size(),
                            devices.size() == 1 ? "" : "s", x.value("rate_hz", 0.0)));
  for (const json& d : devices) {
    std::vector<std::string> parts;
    if (d.contains("util_pct")) {
      parts.push_back(fmt::format("util mean {:.0f}% max {:.0f}%", get(d["util_pct"], "mean"),
                                  get(d["util_pct"], "max")));
    }
    if (d.contains("memory_used_bytes")) {
      parts.push_back(fmt::format("memory max {}{}", gib(get(d["memory_used_bytes"], "max")),
                                  d.contains("memory_total_bytes")
                                      ? " of " + gib(d["memory_total_bytes"].get<double>())
                                      : std::string()));
    }
    if (d.contains("temperature_c")) {
      parts.push_back(fmt::format("{:.0f}-{:.0f} °C", get(d["temperature_c"], "min"),
                                  get(d["temperature_c"], "max")));
    }
    if (d.contains("power_w")) {
      parts.push_back(fmt::format("power mean {:.0f} W max {:.0f} W", get(d["power_w"], "mean"),
                                  get(d["power_w"], "max")));
    }
    const double throttled = d.value("clock_events", json::object()).value("throttled_s", 0.0);
    if (throttled > 0) parts.push_back(fmt::format("throttled {:.1f} s", throttled));
    out.push_back(fmt::format("  GPU {} {}: {} samples; {}", d.value("index", 0),
                              d.value("name", std::string()), d.value("samples", 0),
                              fmt::join(parts, ", ")));
    const json unsupported = d.value("unsupported", json::array());
    if (!unsupported.empty()) {
      out.push_back(fmt::format("      not supported: {}",
                                fmt::join(unsupported.get<std::vector<std::string>>(), ", ")));
    }
    for (const json& p : d.value("processes", json::array())) {
      std::string rank;
      if (p.contains("rank") && p["rank"].is_number()) {
        rank = fmt::format(", rank {}", p["rank"].get<int>());
      }
      std::string figures;
      if (p.contains("memory_used_bytes")) {
        figures += fmt::format("memory max {}", gib(get(p["memory_used_bytes"], "max")));
      }
      if (p.contains("sm_util_pct")) {
        figures += fmt::format("{}SM util mean {:.0f}%", figures.empty() ? "" : ", ",
                               get(p["sm_util_pct"], "mean"));
      }
      out.push_back(fmt::format("      pid {} ({}{}): {}", p.value("pid", 0),
                                p.value("comm", std::string("?")), rank,
                                figures.empty() ? "no readings" : figures));
    }
  }
  return out;
}

}  // namespace eacgm
