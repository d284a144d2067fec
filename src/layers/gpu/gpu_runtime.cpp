#include "layers/gpu/gpu_runtime.h"

#include <fmt/format.h>

#include "layers/gpu/gpu_layer.h"

namespace eacgm {
namespace {

class GpuRuntime : public LayerRuntime {
 public:
  GpuRuntime(const LayerRuntimeSetup& setup, LayerHost& host) : host_(host) {
    options_.library = setup.options.nvml_lib;
    options_.rate_hz = setup.options.gpu_rate_hz;
  }

  // Never fatal: no NVML is the normal case on a machine without a GPU, and the report says so.
  // Only a library asked for by name deserves a warning.
  void start() override {
    gpu_ = GpuLayer::start(options_, host_.session().start_ns);
    if (!gpu_->active() && !options_.library.empty()) {
      host_.warn(fmt::format("the gpu layer is unavailable: {}", gpu_->reason()));
    }
  }

  // Readings and XIDs queued by the sampler's threads since the last tick.
  void tick(uint64_t /*now_ns*/, bool /*final*/) override {
    if (gpu_) gpu_->poll(host_.session(), host_.sinks(), report());
  }

  void finish() override {
    if (gpu_) gpu_->finish(host_.session(), host_.sinks(), report());
  }

  std::optional<std::string> unavailable() const override {
    if (gpu_ && !gpu_->active()) return gpu_->reason();
    return std::nullopt;
  }

 private:
  GpuLayer::Report report() {
    return [this](Anomaly a) { host_.report(std::move(a)); };
  }

  LayerHost& host_;
  GpuLayer::Options options_;
  std::unique_ptr<GpuLayer> gpu_;
};

}  // namespace

std::unique_ptr<LayerRuntime> make_gpu_runtime(const LayerRuntimeSetup& setup, LayerHost& host) {
  return std::make_unique<GpuRuntime>(setup, host);
}

}  // namespace eacgm
