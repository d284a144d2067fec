#include "layers/gpu/gpu_sample.h"

#include <utility>

namespace eacgm {

const std::array<GpuMetricInfo, kGpuMetricCount>& gpu_metrics() {
  // NVML reports percentages, MHz and PCIe KB/s (KiB: nvmlDeviceGetPcieThroughput's "KB" are
  // 1024 bytes).
  static const std::array<GpuMetricInfo, kGpuMetricCount> kMetrics = {{
      {GpuMetric::kUtil, "util_pct", "utilization", "%", "util_ratio", 1, 100},
      {GpuMetric::kMemoryUtil, "memory_util_pct", "memory utilization", "%", "memory_util_ratio", 1,
       100},
      {GpuMetric::kMemoryUsed, "memory_used_bytes", "memory used", "bytes", "memory_used_bytes", 1,
       1},
      {GpuMetric::kTemperature, "temperature_c", "temperature", "°C", "temperature_celsius", 1, 1},
      {GpuMetric::kPower, "power_w", "power", "W", "power_watts", 1, 1},
      {GpuMetric::kPowerLimit, "power_limit_w", "power limit", "W", "power_limit_watts", 1, 1},
      {GpuMetric::kSmClock, "sm_clock_mhz", "SM clock", "MHz", "sm_clock_hertz", 1e6, 1},
      {GpuMetric::kMemoryClock, "memory_clock_mhz", "memory clock", "MHz", "memory_clock_hertz",
       1e6, 1},
      {GpuMetric::kFan, "fan_pct", "fan", "%", "fan_ratio", 1, 100},
      {GpuMetric::kPcieTx, "pcie_tx_kb_per_s", "PCIe TX", "KB/s", "pcie_tx_bytes_per_second", 1024,
       1},
      {GpuMetric::kPcieRx, "pcie_rx_kb_per_s", "PCIe RX", "KB/s", "pcie_rx_bytes_per_second", 1024,
       1},
  }};
  return kMetrics;
}

std::string_view gpu_event_kind_name(GpuEvent::Kind kind) {
  switch (kind) {
    case GpuEvent::Kind::kXid:
      return "xid";
    case GpuEvent::Kind::kEccCorrected:
      return "ecc_corrected";
    case GpuEvent::Kind::kEccUncorrected:
      return "ecc_uncorrected";
  }
  return "unknown";
}

std::vector<std::string> clock_event_reason_names(uint64_t reasons) {
  static constexpr std::pair<uint64_t, const char*> kNames[] = {
      {0x1, "gpu_idle"},
      {0x2, "applications_clocks_setting"},
      {0x4, "sw_power_cap"},
      {0x8, "hw_slowdown"},
      {0x10, "sync_boost"},
      {0x20, "sw_thermal_slowdown"},
      {0x40, "hw_thermal_slowdown"},
      {0x80, "hw_power_brake_slowdown"},
      {0x100, "display_clock_setting"},
  };
  std::vector<std::string> out;
  uint64_t known = 0;
  for (auto [bit, name] : kNames) {
    known |= bit;
    if (reasons & bit) out.emplace_back(name);
  }
  if (reasons & ~known) out.push_back("other");
  return out;
}

std::string_view xid_description(uint64_t xid) {
  // From NVIDIA's public XID error catalog (docs.nvidia.com/deploy/xid-errors).
  switch (xid) {
    case 13:
      return "graphics engine exception";
    case 31:
      return "GPU memory page fault";
    case 32:
      return "invalid or corrupted push buffer stream";
    case 38:
      return "driver firmware error";
    case 43:
      return "GPU stopped processing";
    case 45:
      return "preemptive cleanup, due to previous errors";
    case 48:
      return "double bit ECC error";
    case 61:
      return "internal micro-controller breakpoint/warning";
    case 62:
      return "internal micro-controller halt";
    case 63:
      return "ECC page retirement or row remapping recording event";
    case 64:
      return "ECC page retirement or row remapper recording failure";
    case 68:
      return "video processor exception";
    case 69:
      return "graphics engine class error";
    case 74:
      return "NVLink error";
    case 79:
      return "GPU has fallen off the bus";
    case 92:
      return "high single-bit ECC error rate";
    case 94:
      return "contained ECC error";
    case 95:
      return "uncontained ECC error";
    case 119:
      return "GSP RPC timeout";
    case 120:
      return "GSP error";
    default:
      return {};
  }
}

}  // namespace eacgm
