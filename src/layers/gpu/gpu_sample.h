// What the GPU layer observes, independent of NVML: one reading of one
// device (GpuSample) and one thing a device reported (GpuEvent). The sampler
// produces them on its threads; the recorder hands them to the sinks and the
// monitor on the main thread.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace eacgm {

// Gauges read at every sample; each is summarised as {min, max, mean}.
enum class GpuMetric : uint8_t {
  kUtil,         // percent of time a kernel was running
  kMemoryUtil,   // percent of time device memory was read or written
  kMemoryUsed,   // bytes
  kTemperature,  // degrees Celsius
  kPower,        // watts
  kPowerLimit,   // watts (enforced limit)
  kSmClock,      // MHz
  kMemoryClock,  // MHz
  kFan,          // percent of maximum speed
  kPcieTx,       // KB/s, as NVML reports it
  kPcieRx,       // KB/s
};
inline constexpr size_t kGpuMetricCount = 11;

struct GpuMetricInfo {
  GpuMetric metric;
  std::string_view key;    // summary.json and gpu_samples column: "temperature_c"
  std::string_view label;  // Perfetto track name: "temperature"
  std::string_view unit;   // for people: "°C"
  // Prometheus: the reading's name in base units (seconds, bytes, ratios, Hz, as its naming
  // conventions ask), "temperature_celsius", and how a reading in `unit` becomes one in it:
  // times `to_base_mul`, divided by `to_base_div` (a percentage is divided by 100, not multiplied
  // by 0.01, so that 57 % is 0.57 and not 0.5700000000000001).
  std::string_view prometheus;
  double to_base_mul = 1;
  double to_base_div = 1;
};

// A reading in the unit of `info.prometheus`.
inline double to_base_unit(const GpuMetricInfo& info, double value) {
  return value * info.to_base_mul / info.to_base_div;
}

// Every metric, in enum order.
const std::array<GpuMetricInfo, kGpuMetricCount>& gpu_metrics();
inline const GpuMetricInfo& gpu_metric_info(GpuMetric m) {
  return gpu_metrics()[static_cast<size_t>(m)];
}

// One process's use of one device, as NVML reports it.
struct GpuProcessSample {
  uint32_t pid = 0;
  std::optional<uint64_t> memory_used_bytes;
  std::optional<double> sm_util_pct;  // from the driver's last per-process sample
  std::optional<double> memory_util_pct;
  bool traced = false;  // set on the main thread: the pid is one of the session's processes
};

struct GpuSample {
  uint32_t device = 0;  // NVML index
  uint64_t ts_ns = 0;   // CLOCK_MONOTONIC, like every other timestamp
  std::array<std::optional<double>, kGpuMetricCount> values;  // absent: unsupported or failed
  std::optional<uint64_t> memory_total_bytes;
  std::optional<uint64_t> clock_event_reasons;  // nvmlClocksEventReason* bits
  std::optional<uint64_t> ecc_corrected;        // volatile counts since the driver loaded
  std::optional<uint64_t> ecc_uncorrected;
  std::vector<GpuProcessSample> processes;  // empty when unsupported

  std::optional<double>& operator[](GpuMetric m) { return values[static_cast<size_t>(m)]; }
  const std::optional<double>& operator[](GpuMetric m) const {
    return values[static_cast<size_t>(m)];
  }
};

// Something a device reported through NVML's event set.
struct GpuEvent {
  enum class Kind : uint8_t { kXid, kEccCorrected, kEccUncorrected };
  uint32_t device = 0;
  uint64_t ts_ns = 0;  // CLOCK_MONOTONIC when eacgm received it
  Kind kind = Kind::kXid;
  uint64_t code = 0;  // the XID; 0 for ECC events
};

std::string_view gpu_event_kind_name(GpuEvent::Kind kind);  // "xid", "ecc_corrected", ...

// Names of the set nvmlClocksEventReason* bits: "sw_power_cap", ...
std::vector<std::string> clock_event_reason_names(uint64_t reasons);
// The bits that mean the GPU slowed itself down for heat or power (not idle,
// not an application or sync-boost clock setting).
inline constexpr uint64_t kThermalReasons = 0x8 | 0x20 | 0x40;  // HW slowdown, SW/HW thermal
inline constexpr uint64_t kPowerReasons = 0x4 | 0x80;           // SW power cap, HW power brake
inline constexpr uint64_t kThrottleReasons = kThermalReasons | kPowerReasons;

// A short description of an XID from NVIDIA's public XID catalog; empty
// when it is not one of the common ones.
std::string_view xid_description(uint64_t xid);

}  // namespace eacgm
