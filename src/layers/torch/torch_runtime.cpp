#include "layers/torch/torch_runtime.h"

#include "layers/torch/torch_threads.h"

namespace eacgm {
namespace {

class TorchRuntime : public LayerRuntime {
 public:
  explicit TorchRuntime(LayerHost& host) : host_(host) {}

  void on_call(CallRecord& call, ProcessInfo& /*process*/) override {
    if (call.layer() == Layer::kTorch && !call.inner) threads_.on_op(call);
  }

  // The torch layer's BPF object is loaded by now, so its guard program can be placed.
  void on_mapped_files(uint32_t pid, const std::vector<MappedFile>& files) override {
    ProbeControl* probes = host_.probes();
    if (!probes) return;
    for (const MappedFile& file : files) {
      if (!file.executable || !is_unwinder_library(file.path)) continue;
      auto guarded = probes->attach_unwind_guard(path_in_root_of(pid, file.path));
      if (!guarded) host_.warn(guarded.error().message);
    }
  }

  void forget(uint32_t pid) override {
    Session& session = host_.session();
    if (const ProcessInfo* process = session.find_process(pid)) {
      for (const auto& [tid, name] : process->threads) session.torch_nesting.forget_thread(tid);
    }
    threads_.forget(pid);
  }

  void finish() override {
    Session& session = host_.session();
    LayerState& state = session.layers[Layer::kTorch];
    state.extra["threads"] = threads_.finish(session);
    if (ProbeControl* probes = host_.probes())
      state.extra["calls_unwound"] = probes->calls_unwound();
  }

 private:
  LayerHost& host_;
  TorchThreads threads_;
};

}  // namespace

std::unique_ptr<LayerRuntime> make_torch_runtime(const LayerRuntimeSetup& /*setup*/,
                                                 LayerHost& host) {
  return std::make_unique<TorchRuntime>(host);
}

}  // namespace eacgm
