// Reads every device through NVML on threads of its own, so that a slow NVML
// call never delays the ring buffer, and hands the readings to the main loop:
//
//   sampling thread: every 1/rate s, each device's gauges, clock event
//     reasons, ECC counts, and per-process memory and utilisation;
//   event thread:    blocks in nvmlEventSetWait for XID and ECC events, so an
//     XID is seen when it happens, not at the next sample.
//
// Both push into one mutex-protected queue; the main thread take()s it (the
// session and the sinks are single-threaded). A reading a device answers
// NVML_ERROR_NOT_SUPPORTED (or that the library lacks) is never asked again
// for that device; other errors just leave that value out of the sample.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "layers/gpu/gpu_sample.h"
#include "layers/gpu/nvml_library.h"

namespace eacgm {

class NvmlSampler {
 public:
  struct Options {
    double rate_hz = 10.0;
    // How long one nvmlEventSetWait blocks: bounds how long stop() waits.
    unsigned event_wait_ms = 100;
    // PCIe throughput is measured by the driver over ~20 ms per call, so it
    // is read at most this often (reading it at 10 Hz on 8 GPUs would take
    // longer than the period).
    uint64_t pcie_period_ns = 1'000'000'000;
  };

  // Starts the threads at once; the first sample is taken immediately.
  NvmlSampler(std::shared_ptr<const NvmlLibrary> lib, std::vector<NvmlDeviceInfo> devices,
              Options options);
  ~NvmlSampler();
  NvmlSampler(const NvmlSampler&) = delete;
  NvmlSampler& operator=(const NvmlSampler&) = delete;

  // Stops and joins the threads; idempotent. Readings taken before it stay
  // queued for take().
  void stop();

  struct Batch {
    std::vector<GpuSample> samples;  // in time order
    std::vector<GpuEvent> events;    // in arrival order
  };
  // Everything read since the previous call.
  Batch take();

  // Readings a device does not support, by NVML index: "fan_pct",
  // "ecc_errors", "events", ... Call after stop(): until then the sampling
  // thread may still add to them.
  std::map<uint32_t, std::vector<std::string>> unsupported() const;
  // Event types registered (nvmlEventType* bits) by NVML index.
  std::map<uint32_t, uint64_t> registered_events() const;
  // Samples and events dropped because the queue was full (the main loop stalled).
  uint64_t dropped() const { return dropped_.load(); }

  static constexpr size_t kMaxQueued = 1 << 16;

 private:
  // Per device, owned by the sampling thread.
  struct DeviceState {
    NvmlDeviceInfo info;
    uint32_t unsupported = 0;  // bits: Reading
    unsigned long long last_process_sample_us = 0;
    uint64_t last_pcie_ns = 0;
    std::vector<nvml::ProcessInfo> process_buffer;
    std::vector<nvml::ProcessInfoV1> process_buffer_v1;
    std::vector<nvml::ProcessUtilizationSample> util_buffer;
  };

  void sample_loop();
  void event_loop();
  void register_events();
  GpuSample read_device(DeviceState& device, uint64_t now_ns);
  void read_processes(DeviceState& device, GpuSample& sample);
  // Calls `read` unless the reading is known unsupported; marks it so when
  // the answer says so. True when the reading succeeded.
  template <typename Read>
  bool attempt(DeviceState& device, int reading, Read read);
  void push_sample(GpuSample sample);
  void push_event(GpuEvent event);

  std::shared_ptr<const NvmlLibrary> lib_;
  Options options_;
  std::vector<DeviceState> devices_;
  std::vector<uint64_t> registered_;
  nvml::EventSet event_set_ = nullptr;

  std::mutex queue_mu_;
  Batch queue_;
  std::atomic<uint64_t> dropped_{0};

  std::mutex stop_mu_;
  std::condition_variable stop_cv_;
  std::atomic<bool> stopping_{false};
  std::thread sampler_;
  std::thread waiter_;
};

}  // namespace eacgm
