// The recorder's decisions as targets come and go, against fake probes (probes/probe_control.h):
// which libraries a loader stop probes, and which processes and calls serve's notice leaves
// alone. No kernel, no root: the BPF side is the Tracer's own tests' (tests/bpf).
#include "agent/recorder.h"

#include <dlfcn.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "test_support.h"

namespace eacgm {
namespace {

// Records what the recorder asks; probes nothing.
class FakeProbes : public ProbeControl {
 public:
  std::vector<std::set<Layer>> loaded;
  std::vector<std::pair<Layer, std::string>> attached;
  std::vector<uint32_t> passed_over;
  std::vector<double> sampler_hz;

  Result<void> load_layers(const std::set<Layer>& layers) override {
    loaded.push_back(layers);
    return {};
  }
  Result<bool> attach_library(Layer layer, const std::string& path) override {
    attached.emplace_back(layer, path);
    return true;
  }
  Result<bool> attach_unwind_guard(const std::string&) override { return false; }
  void pass_over(uint32_t pid) override { passed_over.push_back(pid); }
  int drain() override { return 0; }
  std::optional<std::string> layer_problem(Layer) const override { return std::nullopt; }
  const TorchOpTable& torch_ops() const override { return torch_ops_; }
  Result<void> set_cycled_probes(bool) override { return {}; }
  Result<void> set_ioctl_devices(const std::set<uint32_t>&) override { return {}; }
  Result<void> add_python_process(uint32_t, uint64_t, uint32_t) override { return {}; }
  void remove_python_process(uint32_t) override {}
  Result<bool> attach_python_usdt(const std::string&, bool) override { return false; }
  std::vector<PythonCallCount> python_call_counts() const override { return {}; }
  void start_python_sampler(double hz) override { sampler_hz.push_back(hz); }
  uint64_t calls_unwound() const override { return 0; }

 private:
  TorchOpTable torch_ops_;
};

// A pid no process has (above pid_max's ceiling, 2^22), positive as a pid_t: SIGCONT finds nobody.
constexpr uint32_t kNoSuchPid = 2'000'000'000u;

std::vector<std::byte> proc_record(uint16_t kind, uint32_t pid, uint32_t ppid = 0) {
  eacgm_proc p{};
  p.hdr = {kind, pid, pid, 0, 1000};
  p.ppid = ppid;
  return bytes_of(p);
}

std::vector<std::byte> cuda_launch_from(uint32_t pid) {
  eacgm_call c{};
  c.hdr = {EACGM_EV_CALL, pid, pid, EACGM_LAYER_CUDA, 5000};
  c.duration_ns = 1000;
  const std::span<const ProbeSpec> table = probe_table(Layer::kCuda);
  for (size_t i = 0; i < table.size(); ++i) {
    if (table[i].symbol == "cudaLaunchKernel") c.func_id = static_cast<uint32_t>(i);
  }
  return bytes_of(c);
}

// SIGKILL for `pid`, sent by kill(2) from pid 4242 ("killer").
std::vector<std::byte> kill_record(uint32_t pid) {
  eacgm_signal sig{};
  sig.hdr = {EACGM_EV_SIGNAL, pid, pid, EACGM_LAYER_OS, 2000};
  sig.sig = SIGKILL;
  sig.code = 0;  // SI_USER
  sig.group = 1;
  sig.sender_tgid = sig.sender_tid = 4242;
  std::snprintf(sig.sender_comm, sizeof(sig.sender_comm), "killer");
  return bytes_of(sig);
}

std::vector<std::byte> killed_exit_record(uint32_t pid) {
  eacgm_proc p{};
  p.hdr = {EACGM_EV_PROC_EXIT, pid, pid, 0, 3000};
  p.exit_code = SIGKILL;  // as wait(2): killed by the signal, no core
  return bytes_of(p);
}

uint64_t launches_counted(const Session& session) {
  auto layer = session.layers.find(Layer::kCuda);
  if (layer == session.layers.end()) return 0;
  auto calls = layer->second.calls.find("cudaLaunchKernel");
  return calls == layer->second.calls.end() ? 0 : calls->second.count;
}

}  // namespace

TEST(RecorderWithFakeProbes, ALoaderStopProbesTheMappedLibrariesOfEnabledLayersOnly) {
  // This process maps the real libcudart as a job would: the recorder reads /proc/PID/maps.
  void* cudart = dlopen(kCudart, RTLD_LAZY | RTLD_LOCAL);
  if (!cudart) GTEST_SKIP() << kCudart << " cannot be loaded: " << dlerror();
  const auto self = static_cast<uint32_t>(getpid());
  const std::string root = "/proc/" + std::to_string(self) + "/root";

  Session session;
  Recorder recorder(session, {Layer::kCuda, Layer::kNccl});
  FakeProbes probes;
  recorder.set_probes(&probes);
  recorder.handle(proc_record(EACGM_EV_DL_STOP, self));

  ASSERT_EQ(probes.loaded.size(), 1u);
  EXPECT_EQ(probes.loaded[0], std::set<Layer>{Layer::kCuda});  // no NCCL here: not loaded
  ASSERT_EQ(probes.attached.size(), 1u);
  const auto& [layer, path] = probes.attached[0];
  EXPECT_EQ(layer, Layer::kCuda);
  // Through the process's root (another mount namespace works too), the file it maps.
  ASSERT_TRUE(path.starts_with(root + "/")) << path;
  EXPECT_TRUE(std::filesystem::equivalent(path.substr(root.size()), kCudart)) << path;
  EXPECT_TRUE(recorder.layer_mapped(Layer::kCuda));
  EXPECT_FALSE(recorder.layer_mapped(Layer::kNccl));
  // The stopped target was resumed, and its wait counted as eacgm's cost to the job.
  EXPECT_EQ(recorder.pauses().count, 1u);

  // A recorder without the cuda layer probes nothing of it.
  Session other;
  Recorder without_cuda(other, {Layer::kNccl});
  FakeProbes none;
  without_cuda.set_probes(&none);
  without_cuda.handle(proc_record(EACGM_EV_DL_STOP, self));
  EXPECT_TRUE(none.attached.empty());
  EXPECT_FALSE(without_cuda.layer_mapped(Layer::kCuda));
  dlclose(cudart);
}

TEST(RecorderWithFakeProbes, ANoticedProcessRefusedIsPassedOverWithItsChildrenAndCalls) {
  Session session;
  Recorder recorder(session, {Layer::kCuda});
  FakeProbes probes;
  recorder.set_probes(&probes);
  const uint32_t refused = kNoSuchPid, taken = kNoSuchPid + 1, child = kNoSuchPid + 2;
  std::vector<uint32_t> asked;
  recorder.set_notice_handler([&](uint32_t pid, uint64_t) {
    asked.push_back(pid);
    return pid == taken;
  });

  recorder.handle(proc_record(EACGM_EV_DL_NOTICE, refused));
  recorder.handle(proc_record(EACGM_EV_DL_NOTICE, taken));
  EXPECT_EQ(asked, (std::vector<uint32_t>{refused, taken}));
  EXPECT_EQ(probes.passed_over, std::vector<uint32_t>{refused});

  // What the refused process does is not ours: its calls and the children it forked (targets
  // in the kernel for a moment, by its brief targethood) are left alone too.
  recorder.handle(cuda_launch_from(refused));
  recorder.handle(proc_record(EACGM_EV_PROC_FORK, child, refused));
  EXPECT_EQ(launches_counted(session), 0u);
  EXPECT_EQ(probes.passed_over, (std::vector<uint32_t>{refused, child}));
  EXPECT_EQ(session.find_process(child), nullptr);

  // The taken one's calls count.
  recorder.handle(cuda_launch_from(taken));
  EXPECT_EQ(launches_counted(session), 1u);
}

// Each enabled layer's live state is its runtime's (layers/layer_runtime.h): the os layer's
// signals explain an exit, and a recorder without the os layer has no such state.
TEST(RecorderWithFakeProbes, AnEnabledLayersRuntimeSeesItsRecordsAndExplainsAnExit) {
  for (const bool with_os : {true, false}) {
    Session session;
    std::set<Layer> layers{Layer::kCuda};
    if (with_os) layers.insert(Layer::kOs);
    Recorder recorder(session, layers);
    FakeProbes probes;
    recorder.set_probes(&probes);
    recorder.handle(kill_record(kNoSuchPid));
    recorder.handle(killed_exit_record(kNoSuchPid));
    const ProcessInfo* process = session.find_process(kNoSuchPid);
    ASSERT_NE(process, nullptr);
    ASSERT_TRUE(process->exit.has_value());
    EXPECT_EQ(process->exit->signal, SIGKILL);
    EXPECT_EQ(process->exit->cause,
              with_os ? "killed by SIGKILL from pid 4242 (killer)" : "killed by SIGKILL (Killed)")
        << (with_os ? "with" : "without") << " the os layer";
  }
}

// start_layers() starts each enabled layer's runtime once the probes are set: the python layer's
// sampler at --python-rate-hz, and nothing of a layer that is not enabled.
TEST(RecorderWithFakeProbes, StartingTheLayersStartsThePythonSamplerOnlyWhenItIsEnabled) {
  AgentOptions options;
  options.python_rate_hz = 37;
  Session session;
  Recorder recorder(session, {Layer::kCuda, Layer::kPython}, options);
  FakeProbes probes;
  recorder.set_probes(&probes);
  recorder.start_layers();
  EXPECT_EQ(probes.sampler_hz, std::vector<double>{37});

  Session other;
  Recorder without_python(other, {Layer::kCuda, Layer::kOs}, options);
  FakeProbes none;
  without_python.set_probes(&none);
  without_python.start_layers();
  EXPECT_TRUE(none.sampler_hz.empty());
}

// Records what a runtime asks of its host; hosts nothing else.
class FakeHost : public LayerHost {
 public:
  Session& session() override { return session_; }
  ProbeControl* probes() override { return nullptr; }
  std::span<const std::unique_ptr<Sink>> sinks() override { return {}; }
  void report(Anomaly) override {}
  void warn(std::string) override {}
  void remember(uint32_t, const Event&) override {}

 private:
  Session session_;
};

// A layer with live state has a runtime, made only when the layer is enabled, in registry order;
// the cuda and driver layers' calls are the session's to count and need none.
TEST(LayerRuntimes, OnlyEnabledLayersWithLiveStateGetARuntimeInRegistryOrder) {
  FakeHost host;
  const AgentOptions options;
  const AgentMode mode;
  std::set<Layer> every(all_layers().begin(), all_layers().end());
  std::vector<Layer> made;
  for (const auto& [layer, runtime] : make_layer_runtimes(every, {options, mode}, host)) {
    ASSERT_NE(runtime, nullptr);
    made.push_back(layer);
  }
  EXPECT_EQ(made, (std::vector<Layer>{Layer::kNccl, Layer::kTorch, Layer::kPython, Layer::kOs,
                                      Layer::kGpu}));
  const LayerRuntimes some =
      make_layer_runtimes({Layer::kCuda, Layer::kDriver, Layer::kOs}, {options, mode}, host);
  ASSERT_EQ(some.size(), 1u);
  EXPECT_EQ(some[0].first, Layer::kOs);
}

}  // namespace eacgm
