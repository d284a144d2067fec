// The gpu layer of a recording: NVML opened (or the reason it cannot be),
// the sampler's threads, and the monitor. The recorder calls poll() from its
// tick() on the main thread, which moves the sampler's readings into the
// sinks and the monitor and reports anomalies; finish() stops sampling and
// writes `layers.gpu` into the session.
#pragma once

#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "layers/gpu/gpu_monitor.h"
#include "layers/gpu/nvml_library.h"
#include "layers/gpu/nvml_sampler.h"
#include "session/session.h"
#include "sinks/sink.h"

namespace eacgm {

class GpuLayer {
 public:
  struct Options {
    std::string library;  // path given with --nvml-lib; empty: libnvidia-ml.so.1 on the search path
    double rate_hz = 10.0;
    GpuMonitor::Options monitor;
  };

  // Never fails: without NVML (or without a GPU) the layer is unavailable,
  // reason() says why, and the other layers are not affected.
  static std::unique_ptr<GpuLayer> start(const Options& options, uint64_t session_start_ns);
  ~GpuLayer();

  bool active() const { return sampler_ != nullptr; }
  const std::string& reason() const { return reason_; }

  using Report = std::function<void(Anomaly)>;
  // Main thread: readings since the last call go to the sinks and the
  // monitor; anomalies go to `report`.
  void poll(Session& session, std::span<const std::unique_ptr<Sink>> sinks, const Report& report);
  // Stops sampling, polls one last time, and fills session.layers[gpu].
  void finish(Session& session, std::span<const std::unique_ptr<Sink>> sinks, const Report& report);

 private:
  GpuLayer() = default;

  Options options_;
  std::string reason_;
  std::shared_ptr<const NvmlLibrary> lib_;
  std::string driver_;
  std::string nvml_version_;
  std::unique_ptr<NvmlSampler> sampler_;
  GpuMonitor monitor_;
  bool finished_ = false;
};

// `eacgm doctor`'s view of NVML: whether it loads, the driver, the devices.
struct NvmlStatus {
  bool ok = false;
  std::string detail;                // one line: driver and device count, or why not
  std::vector<std::string> devices;  // "0: <name> <uuid>"
};
NvmlStatus probe_nvml(const std::string& library);

}  // namespace eacgm
