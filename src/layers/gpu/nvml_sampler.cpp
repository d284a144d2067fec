#include "layers/gpu/nvml_sampler.h"

#include <time.h>

#include <algorithm>
#include <chrono>
#include <map>

#include "common/clock.h"

namespace eacgm {
namespace {

// What the sampler asks a device for, one bit each in DeviceState::unsupported.
enum Reading : int {
  kReadUtilization,
  kReadMemory,
  kReadTemperature,
  kReadPower,
  kReadPowerLimit,
  kReadSmClock,
  kReadMemoryClock,
  kReadFan,
  kReadPcieTx,
  kReadPcieRx,
  kReadClockReasons,
  kReadEcc,
  kReadProcesses,
  kReadProcessUtilization,
  kReadEvents,
  kReadingCount,
};

// The names summary.json lists under `unsupported`.
constexpr const char* kReadingNames[kReadingCount] = {
    "util_pct",
    "memory_used_bytes",
    "temperature_c",
    "power_w",
    "power_limit_w",
    "sm_clock_mhz",
    "memory_clock_mhz",
    "fan_pct",
    "pcie_tx_kb_per_s",
    "pcie_rx_kb_per_s",
    "clock_event_reasons",
    "ecc_errors",
    "processes",
    "process_utilization",
    "events",
};

// The answers that mean "this device will never have it": not supported, or
// a library too old to have the function at all.
bool never_available(nvml::Return r) {
  return r == nvml::kErrorNotSupported || r == nvml::kErrorFunctionNotFound;
}

constexpr uint64_t kWantedEvents = nvml::kEventTypeXidCriticalError |
                                   nvml::kEventTypeSingleBitEccError |
                                   nvml::kEventTypeDoubleBitEccError;

}  // namespace

NvmlSampler::NvmlSampler(std::shared_ptr<const NvmlLibrary> lib,
                         std::vector<NvmlDeviceInfo> devices, Options options)
    : lib_(std::move(lib)), options_(options) {
  if (!(options_.rate_hz > 0)) options_.rate_hz = 10.0;
  for (NvmlDeviceInfo& info : devices) {
    DeviceState state;
    state.info = std::move(info);
    devices_.push_back(std::move(state));
  }
  registered_.assign(devices_.size(), 0);
  register_events();
  sampler_ = std::thread([this] { sample_loop(); });
  if (event_set_) waiter_ = std::thread([this] { event_loop(); });
}

NvmlSampler::~NvmlSampler() {
  stop();
  if (event_set_ && lib_->fn().event_set_free) lib_->fn().event_set_free(event_set_);
}

void NvmlSampler::stop() {
  {
    std::lock_guard<std::mutex> lock(stop_mu_);
    stopping_ = true;
  }
  stop_cv_.notify_all();
  if (sampler_.joinable()) sampler_.join();
  if (waiter_.joinable()) waiter_.join();
}

NvmlSampler::Batch NvmlSampler::take() {
  Batch out;
  std::lock_guard<std::mutex> lock(queue_mu_);
  std::swap(out, queue_);
  return out;
}

std::map<uint32_t, uint64_t> NvmlSampler::registered_events() const {
  std::map<uint32_t, uint64_t> out;
  for (size_t i = 0; i < devices_.size(); ++i) out[devices_[i].info.index] = registered_[i];
  return out;
}

std::map<uint32_t, std::vector<std::string>> NvmlSampler::unsupported() const {
  std::map<uint32_t, std::vector<std::string>> out;
  for (const DeviceState& d : devices_) {
    std::vector<std::string> names;
    for (int r = 0; r < kReadingCount; ++r) {
      if (!(d.unsupported & (1u << r))) continue;
      names.emplace_back(kReadingNames[r]);
      // One call answers both utilisations.
      if (r == kReadUtilization) names.emplace_back("memory_util_pct");
    }
    out[d.info.index] = std::move(names);
  }
  return out;
}

void NvmlSampler::push_sample(GpuSample sample) {
  std::lock_guard<std::mutex> lock(queue_mu_);
  if (queue_.samples.size() >= kMaxQueued) {
    ++dropped_;
    return;
  }
  queue_.samples.push_back(std::move(sample));
}

void NvmlSampler::push_event(GpuEvent event) {
  std::lock_guard<std::mutex> lock(queue_mu_);
  if (queue_.events.size() >= kMaxQueued) {
    ++dropped_;
    return;
  }
  queue_.events.push_back(event);
}

template <typename Read>
bool NvmlSampler::attempt(DeviceState& device, int reading, Read read) {
  if (device.unsupported & (1u << reading)) return false;
  const nvml::Return r = read();
  if (r == nvml::kSuccess) return true;
  if (never_available(r)) device.unsupported |= 1u << reading;
  return false;
}

void NvmlSampler::register_events() {
  const NvmlFunctions& fn = lib_->fn();
  auto mark_all = [this] {
    for (DeviceState& d : devices_) d.unsupported |= 1u << kReadEvents;
  };
  if (!fn.event_set_create || !fn.register_events || !fn.event_set_wait || devices_.empty() ||
      fn.event_set_create(&event_set_) != nvml::kSuccess || !event_set_) {
    event_set_ = nullptr;
    mark_all();
    return;
  }
  bool any = false;
  for (size_t i = 0; i < devices_.size(); ++i) {
    DeviceState& d = devices_[i];
    uint64_t wanted = kWantedEvents;
    unsigned long long supported = 0;
    if (fn.supported_event_types &&
        fn.supported_event_types(d.info.handle, &supported) == nvml::kSuccess) {
      wanted &= supported;
    }
    // Registration fails as a whole when one type is unsupported, so fall
    // back to XIDs alone: they matter most.
    nvml::Return r =
        wanted ? fn.register_events(d.info.handle, wanted, event_set_) : nvml::kErrorNotSupported;
    if (r != nvml::kSuccess && wanted != nvml::kEventTypeXidCriticalError) {
      wanted = nvml::kEventTypeXidCriticalError;
      r = fn.register_events(d.info.handle, wanted, event_set_);
    }
    if (r == nvml::kSuccess) {
      registered_[i] = wanted;
      any = true;
    } else {
      d.unsupported |= 1u << kReadEvents;
    }
  }
  if (!any) {
    if (fn.event_set_free) fn.event_set_free(event_set_);
    event_set_ = nullptr;
  }
}

void NvmlSampler::sample_loop() {
  const auto period = std::chrono::nanoseconds(static_cast<int64_t>(1e9 / options_.rate_hz));
  auto next = std::chrono::steady_clock::now();
  while (!stopping_) {
    for (DeviceState& device : devices_) {
      if (stopping_) break;
      push_sample(read_device(device, monotonic_ns()));
    }
    next += period;
    const auto now = std::chrono::steady_clock::now();
    // Behind schedule (slow NVML calls): skip the missed ticks rather than
    // sampling in a burst to catch up.
    if (next < now) next = now + period - (now - next) % period;
    std::unique_lock<std::mutex> lock(stop_mu_);
    stop_cv_.wait_until(lock, next, [this] { return stopping_.load(); });
  }
}

GpuSample NvmlSampler::read_device(DeviceState& d, uint64_t now_ns) {
  const NvmlFunctions& fn = lib_->fn();
  nvml::Device h = d.info.handle;
  GpuSample s;
  s.device = d.info.index;
  s.ts_ns = now_ns;

  auto missing = [](auto f) { return f == nullptr; };
  auto call = [&](int reading, auto f, auto read) {
    if (missing(f)) {
      d.unsupported |= 1u << reading;
      return false;
    }
    return attempt(d, reading, read);
  };

  nvml::Utilization util{};
  if (call(kReadUtilization, fn.utilization, [&] { return fn.utilization(h, &util); })) {
    s[GpuMetric::kUtil] = util.gpu;
    s[GpuMetric::kMemoryUtil] = util.memory;
  }
  nvml::Memory mem{};
  if (call(kReadMemory, fn.memory_info, [&] { return fn.memory_info(h, &mem); })) {
    s[GpuMetric::kMemoryUsed] = static_cast<double>(mem.used);
    s.memory_total_bytes = mem.total;
  }
  unsigned value = 0;
  if (call(kReadTemperature, fn.temperature,
           [&] { return fn.temperature(h, nvml::kTemperatureGpu, &value); })) {
    s[GpuMetric::kTemperature] = value;
  }
  if (call(kReadPower, fn.power_usage, [&] { return fn.power_usage(h, &value); })) {
    s[GpuMetric::kPower] = value / 1000.0;  // milliwatts
  }
  if (call(kReadPowerLimit, fn.power_limit, [&] { return fn.power_limit(h, &value); })) {
    s[GpuMetric::kPowerLimit] = value / 1000.0;
  }
  if (call(kReadSmClock, fn.clock_info, [&] { return fn.clock_info(h, nvml::kClockSm, &value); })) {
    s[GpuMetric::kSmClock] = value;
  }
  if (call(kReadMemoryClock, fn.clock_info,
           [&] { return fn.clock_info(h, nvml::kClockMem, &value); })) {
    s[GpuMetric::kMemoryClock] = value;
  }
  if (call(kReadFan, fn.fan_speed, [&] { return fn.fan_speed(h, &value); })) {
    s[GpuMetric::kFan] = value;
  }
  if (d.last_pcie_ns == 0 || now_ns - d.last_pcie_ns >= options_.pcie_period_ns) {
    d.last_pcie_ns = now_ns;
    if (call(kReadPcieTx, fn.pcie_throughput,
             [&] { return fn.pcie_throughput(h, nvml::kPcieUtilTxBytes, &value); })) {
      s[GpuMetric::kPcieTx] = value;
    }
    if (call(kReadPcieRx, fn.pcie_throughput,
             [&] { return fn.pcie_throughput(h, nvml::kPcieUtilRxBytes, &value); })) {
      s[GpuMetric::kPcieRx] = value;
    }
  }
  unsigned long long bits = 0;
  if (call(kReadClockReasons, fn.clock_reasons, [&] { return fn.clock_reasons(h, &bits); })) {
    s.clock_event_reasons = bits;
  }
  unsigned long long corrected = 0, uncorrected = 0;
  if (call(kReadEcc, fn.ecc_errors, [&] {
        nvml::Return r =
            fn.ecc_errors(h, nvml::kMemoryErrorTypeCorrected, nvml::kVolatileEcc, &corrected);
        return r != nvml::kSuccess ? r
                                   : fn.ecc_errors(h, nvml::kMemoryErrorTypeUncorrected,
                                                   nvml::kVolatileEcc, &uncorrected);
      })) {
    s.ecc_corrected = corrected;
    s.ecc_uncorrected = uncorrected;
  }
  read_processes(d, s);
  return s;
}

void NvmlSampler::read_processes(DeviceState& d, GpuSample& s) {
  const NvmlFunctions& fn = lib_->fn();
  nvml::Device h = d.info.handle;
  std::map<uint32_t, GpuProcessSample> by_pid;

  if (!fn.compute_processes) {
    d.unsupported |= 1u << kReadProcesses;
  } else if (!(d.unsupported & (1u << kReadProcesses))) {
    // The count is an in/out argument: capacity in, processes out. A buffer
    // too small answers INSUFFICIENT_SIZE with the count needed: grow, retry.
    auto read = [&](auto& buffer) {
      if (buffer.empty()) buffer.resize(32);
      for (int attempt = 0; attempt < 3; ++attempt) {
        unsigned count = static_cast<unsigned>(buffer.size());
        const nvml::Return r = fn.compute_processes(h, &count, buffer.data());
        if (r == nvml::kSuccess) {
          for (unsigned i = 0; i < std::min<size_t>(count, buffer.size()); ++i) {
            GpuProcessSample& p = by_pid[buffer[i].pid];
            p.pid = buffer[i].pid;
            if (buffer[i].usedGpuMemory != nvml::kValueNotAvailable) {
              p.memory_used_bytes = buffer[i].usedGpuMemory;
            }
          }
          return;
        }
        if (r != nvml::kErrorInsufficientSize) {
          if (never_available(r)) d.unsupported |= 1u << kReadProcesses;
          return;
        }
        buffer.resize(std::max<size_t>(count, buffer.size()) + 16);
      }
    };
    if (fn.compute_processes_v1) {
      read(d.process_buffer_v1);
    } else {
      read(d.process_buffer);
    }
  }

  if (!fn.process_utilization) {
    d.unsupported |= 1u << kReadProcessUtilization;
  } else if (!(d.unsupported & (1u << kReadProcessUtilization))) {
    if (d.util_buffer.empty()) d.util_buffer.resize(64);
    for (int attempt = 0; attempt < 3; ++attempt) {
      unsigned count = static_cast<unsigned>(d.util_buffer.size());
      const nvml::Return r =
          fn.process_utilization(h, d.util_buffer.data(), &count, d.last_process_sample_us);
      if (r == nvml::kErrorInsufficientSize) {
        d.util_buffer.resize(std::max<size_t>(count, d.util_buffer.size()) + 16);
        continue;
      }
      // NOT_FOUND: no new per-process sample since the last one we saw.
      if (never_available(r)) d.unsupported |= 1u << kReadProcessUtilization;
      if (r != nvml::kSuccess) break;
      // Several samples per process may be buffered: keep the newest.
      std::map<uint32_t, unsigned long long> newest;
      for (unsigned i = 0; i < std::min<size_t>(count, d.util_buffer.size()); ++i) {
        const nvml::ProcessUtilizationSample& u = d.util_buffer[i];
        d.last_process_sample_us = std::max(d.last_process_sample_us, u.timeStamp);
        auto [it, fresh] = newest.try_emplace(u.pid, u.timeStamp);
        if (!fresh && it->second > u.timeStamp) continue;
        it->second = u.timeStamp;
        GpuProcessSample& p = by_pid[u.pid];
        p.pid = u.pid;
        p.sm_util_pct = u.smUtil;
        p.memory_util_pct = u.memUtil;
      }
      break;
    }
  }
  for (auto& [pid, p] : by_pid) s.processes.push_back(p);
}

void NvmlSampler::event_loop() {
  const NvmlFunctions& fn = lib_->fn();
  while (!stopping_) {
    // Room for either struct version; the v1 one is a prefix of the v2 one.
    nvml::EventData data{};
    const nvml::Return r = fn.event_set_wait(event_set_, &data, options_.event_wait_ms);
    if (r == nvml::kErrorTimeout) continue;
    if (r != nvml::kSuccess) {
      // A lost GPU or a broken driver answers at once: do not spin on it.
      std::unique_lock<std::mutex> lock(stop_mu_);
      stop_cv_.wait_for(lock, std::chrono::milliseconds(options_.event_wait_ms),
                        [this] { return stopping_.load(); });
      continue;
    }
    GpuEvent event;
    event.ts_ns = monotonic_ns();
    bool known = false;
    for (const DeviceState& d : devices_) {
      if (d.info.handle == data.device) {
        event.device = d.info.index;
        known = true;
      }
    }
    if (!known) continue;  // not a device we registered: nothing to attribute it to
    if (data.eventType & nvml::kEventTypeXidCriticalError) {
      event.kind = GpuEvent::Kind::kXid;
      event.code = data.eventData;
    } else if (data.eventType & nvml::kEventTypeDoubleBitEccError) {
      event.kind = GpuEvent::Kind::kEccUncorrected;
    } else if (data.eventType & nvml::kEventTypeSingleBitEccError) {
      event.kind = GpuEvent::Kind::kEccCorrected;
    } else {
      continue;  // a type we did not ask for
    }
    push_event(event);
  }
}

}  // namespace eacgm
