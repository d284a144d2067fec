#include "layers/gpu/gpu_layer.h"

#include <fmt/format.h>

namespace eacgm {

std::unique_ptr<GpuLayer> GpuLayer::start(const Options& options, uint64_t session_start_ns) {
  std::unique_ptr<GpuLayer> layer(new GpuLayer());
  layer->options_ = options;
  layer->monitor_ = GpuMonitor(options.monitor);
  layer->monitor_.set_session_start(session_start_ns);

  auto lib = NvmlLibrary::open(options.library);
  if (!lib) {
    layer->reason_ = lib.error().message;
    return layer;
  }
  std::shared_ptr<const NvmlLibrary> shared = std::move(*lib);
  auto devices = shared->devices();
  if (!devices) {
    layer->reason_ = devices.error().message;
    return layer;
  }
  layer->driver_ = shared->driver_version();
  layer->nvml_version_ = shared->nvml_version();
  if (devices->empty()) {
    layer->reason_ = fmt::format("NVML (driver {}) sees no GPU",
                                 layer->driver_.empty() ? "unknown" : layer->driver_);
    return layer;
  }
  std::vector<GpuMonitor::Device> known;
  for (const NvmlDeviceInfo& d : *devices) known.push_back({d.index, d.name, d.uuid, 0});
  layer->lib_ = shared;
  NvmlSampler::Options sampling;
  sampling.rate_hz = options.rate_hz;
  layer->sampler_ = std::make_unique<NvmlSampler>(shared, std::move(*devices), sampling);
  const std::map<uint32_t, uint64_t> registered = layer->sampler_->registered_events();
  for (GpuMonitor::Device& d : known) {
    auto it = registered.find(d.index);
    d.registered_events = it != registered.end() ? it->second : 0;
    layer->monitor_.add_device(std::move(d));
  }
  return layer;
}

GpuLayer::~GpuLayer() {
  // Threads first: they use the library.
  if (sampler_) sampler_->stop();
  sampler_.reset();
}

void GpuLayer::poll(Session& session, std::span<const std::unique_ptr<Sink>> sinks,
                    const Report& report) {
  if (!sampler_) return;
  NvmlSampler::Batch batch = sampler_->take();
  for (GpuSample& sample : batch.samples) {
    // The join: which of the device's processes are ones this session traces.
    for (GpuProcessSample& p : sample.processes) p.traced = session.find_process(p.pid) != nullptr;
    monitor_.on_sample(sample);
    for (const auto& sink : sinks) sink->on_gpu_sample(sample);
  }
  for (const GpuEvent& event : batch.events) {
    monitor_.on_event(event);
    for (const auto& sink : sinks) sink->on_gpu_event(event);
  }
  for (Anomaly& a : monitor_.take_anomalies(session)) report(std::move(a));
}

void GpuLayer::finish(Session& session, std::span<const std::unique_ptr<Sink>> sinks,
                      const Report& report) {
  if (finished_) return;
  finished_ = true;
  LayerState& state = session.layers[Layer::kGpu];
  state.libraries.clear();
  if (!sampler_) {
    state.status = LayerStatus::kUnavailable;
    state.reason = reason_;
    return;
  }
  sampler_->stop();
  poll(session, sinks, report);
  state.status = LayerStatus::kActive;
  state.reason.clear();
  state.libraries.push_back(lib_->path());
  state.extra["library"] = lib_->path();
  state.extra["driver"] = driver_;
  state.extra["nvml_version"] = nvml_version_;
  state.extra["rate_hz"] = options_.rate_hz;
  state.extra["dropped_samples"] = sampler_->dropped();
  state.extra["devices"] = monitor_.devices_json(session, sampler_->unsupported());
}

NvmlStatus probe_nvml(const std::string& library) {
  NvmlStatus status;
  auto lib = NvmlLibrary::open(library);
  if (!lib) {
    status.detail = lib.error().message + "; the gpu layer will be unavailable";
    return status;
  }
  auto devices = (*lib)->devices();
  if (!devices) {
    status.detail = devices.error().message;
    return status;
  }
  const std::string driver = (*lib)->driver_version();
  status.ok = !devices->empty();
  status.detail =
      fmt::format("{}: driver {}, NVML {}, {} GPU{}", (*lib)->path(), driver.empty() ? "?" : driver,
                  (*lib)->nvml_version().empty() ? "?" : (*lib)->nvml_version(), devices->size(),
                  devices->size() == 1 ? "" : "s");
  for (const NvmlDeviceInfo& d : *devices) {
    status.devices.push_back(fmt::format("{}: {} {}", d.index, d.name, d.uuid));
  }
  return status;
}

}  // namespace eacgm
