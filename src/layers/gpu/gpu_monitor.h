// The GPU layer's analysis, pure C++ on GpuSample/GpuEvent (no NVML): per
// device and metric {min, max, mean}, per traced process the same, time spent
// throttled, and the anomalies: each XID and ECC event, and thermal or power
// throttling that lasts. Fed on the main thread; testable on made-up samples.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "layers/gpu/gpu_sample.h"
#include "session/session.h"

namespace eacgm {

// min, max and mean of a series of readings.
struct MetricStats {
  uint64_t count = 0;
  double min = 0;
  double max = 0;
  double sum = 0;

  void add(double value);
  double mean() const { return count ? sum / static_cast<double>(count) : 0.0; }
  // {"min": .., "max": .., "mean": ..}; whole numbers stay integers.
  nlohmann::json json() const;
};

// Throttling that lasts: reports once when the throttle bits have been set in
// every sample for at least `min_ns`, and re-arms when a sample has none.
class ThrottleDetector {
 public:
  explicit ThrottleDetector(uint64_t min_ns) : min_ns_(min_ns) {}

  struct Episode {
    uint64_t start_ns = 0;  // first sample with the bits set
    uint64_t now_ns = 0;    // the sample that made it last long enough
    uint64_t reasons = 0;   // union of the throttle bits seen in the episode
  };
  // `reasons`: the sample's nvmlClocksEventReason bits. Returns the episode
  // the first time it has lasted min_ns.
  std::optional<Episode> observe(uint64_t ts_ns, uint64_t reasons);

 private:
  uint64_t min_ns_;
  std::optional<uint64_t> start_ns_;
  uint64_t reasons_ = 0;
  bool reported_ = false;
};

class GpuMonitor {
 public:
  struct Options {
    uint64_t throttle_min_ns = 2'000'000'000;  // throttling this long is an anomaly
  };
  struct Device {
    uint32_t index = 0;
    std::string name;
    std::string uuid;
    uint64_t registered_events = 0;  // nvmlEventType* bits the sampler waits for
  };

  GpuMonitor() : GpuMonitor(Options{}) {}
  explicit GpuMonitor(Options options) : options_(options) {}

  void set_session_start(uint64_t ns) { session_start_ns_ = ns; }
  void add_device(Device device);

  // `sample.processes[].traced` must be set already.
  void on_sample(const GpuSample& sample);
  void on_event(const GpuEvent& event);
  // Anomalies found since the last call; pid and rank are filled from the
  // session where one traced process was using the device.
  std::vector<Anomaly> take_anomalies(const Session& session);

  // layers.gpu.devices: one entry per device, with `unsupported` from the
  // sampler (by device index) and traced processes named from `session`.
  nlohmann::json devices_json(
      const Session& session,
      const std::map<uint32_t, std::vector<std::string>>& unsupported) const;

 private:
  struct ProcessStats {
    uint64_t samples = 0;
    MetricStats memory_used_bytes;
    MetricStats sm_util_pct;
    MetricStats memory_util_pct;
  };
  struct DeviceStats {
    Device info;
    uint64_t samples = 0;
    std::array<MetricStats, kGpuMetricCount> metrics;
    std::optional<uint64_t> memory_total_bytes;
    std::optional<uint64_t> ecc_corrected_first, ecc_corrected_last;
    std::optional<uint64_t> ecc_uncorrected_first, ecc_uncorrected_last;
    uint64_t last_ts_ns = 0;
    std::optional<uint64_t> last_reasons;
    double throttled_s = 0;
    std::map<std::string, double> reason_s;  // seconds each clock event reason was set
    ThrottleDetector throttle{0};
    std::map<uint32_t, ProcessStats> processes;  // traced pids
    std::set<uint32_t> other_pids;               // untraced pids seen using the device
    std::vector<uint32_t> current_pids;          // traced pids in the latest sample
    std::map<GpuEvent::Kind, uint64_t> events;   // by kind
    std::vector<nlohmann::json> xids;            // {xid, t_s}
    std::optional<double> last_temperature, last_power, last_power_limit, last_sm_clock;
  };

  DeviceStats& device(uint32_t index);
  double t_s(uint64_t ns) const;
  void throttle_anomaly(const DeviceStats& d, const ThrottleDetector::Episode& episode);

  Options options_;
  uint64_t session_start_ns_ = 0;
  std::map<uint32_t, DeviceStats> devices_;
  struct Pending {
    Anomaly anomaly;
    uint32_t device = 0;
  };
  std::vector<Pending> pending_;
};

}  // namespace eacgm
