#include "layers/python/python_runtime.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <set>

#include "layers/python/python_binary.h"
#include "layers/python/python_layouts.h"
#include "layers/python/python_profile.h"

namespace eacgm {
namespace {

class PythonRuntime : public LayerRuntime {
 public:
  PythonRuntime(const LayerRuntimeSetup& setup, LayerHost& host)
      : host_(host),
        python_({.rate_hz = setup.options.python_rate_hz,
                 .slow_call_ns = static_cast<uint64_t>(setup.options.python_slow_ms * 1e6)}),
        count_calls_(setup.options.python_calls),
        rate_hz_(setup.options.python_rate_hz) {}

  void start() override {
    if (ProbeControl* probes = host_.probes()) probes->start_python_sampler(rate_hz_);
  }

  bool on_event(const Event& event) override {
    if (const auto* sample = std::get_if<PySampleEvent>(&event)) {
      for (const PythonStackChange& change : python_.on_sample(*sample)) {
        for (const auto& sink : host_.sinks()) sink->on_python_stack(change);
      }
    } else if (const auto* code = std::get_if<PyCodeEvent>(&event)) {
      python_.on_code(*code);
    } else if (const auto* function = std::get_if<PyFunctionEvent>(&event)) {
      python_.on_function(*function);
    } else if (const auto* gc = std::get_if<PyGcEvent>(&event)) {
      python_.on_gc(*gc);
      ++host_.session().events_recorded;
    } else {
      return false;
    }
    return true;
  }

  void on_call(CallRecord& call, ProcessInfo& /*process*/) override {
    // The Python line that made the call, from the frame its BPF program read.
    if (call.py_code != 0) call.py_site = python_.site(call.pid, call.py_code, call.py_instr);
    // Its thread does the job's work; an inner call's time is its outer call's.
    if (!call.inner) python_.note_traced_call(call.pid, call.tid, call.start_ns, call.duration_ns);
  }

  void on_mapped_files(uint32_t pid, const std::vector<MappedFile>& files) override {
    find_interpreter(pid, files);
  }

  // A fork runs its parent's interpreter at the same addresses.
  void on_fork(uint32_t parent, uint32_t child) override {
    ProbeControl* probes = host_.probes();
    auto found = processes_.find(parent);
    if (!probes || found == processes_.end()) return;
    const Registration reg = found->second;
    if (auto r = probes->add_python_process(child, reg.runtime, reg.layout); !r) {
      host_.warn(r.error().message);
      return;
    }
    processes_[child] = reg;
    python_.on_fork(parent, child);
  }

  // Its interpreter is gone with its image.
  void on_exec(uint32_t pid) override {
    if (unregister(pid)) python_.forget(pid);
  }

  void on_exit(uint32_t pid, ProcessInfo& /*process*/) override { unregister(pid); }

  void tick(uint64_t now_ns, bool final) override {
    for (Anomaly& a : python_.take_anomalies(host_.session(), now_ns, final)) {
      host_.report(std::move(a));
    }
  }

  // A window anomaly of a process whose threads waited for a CPU for much of it says so: the
  // machine's CPUs were taken, which is where to look first (PythonProfile::cpu_wait_share).
  void explain_window(Anomaly& anomaly) const override {
    const auto window = anomaly.evidence.find("window_s");
    if (!anomaly.pid || window == anomaly.evidence.end() || !window->is_array() ||
        window->size() != 2) {
      return;
    }
    const uint64_t start_ns = host_.session().start_ns;
    auto ns = [start_ns](const nlohmann::json& s) {
      return start_ns + static_cast<uint64_t>(std::max(0.0, s.get<double>()) * 1e9);
    };
    const std::optional<double> share =
        python_.cpu_wait_share(*anomaly.pid, ns((*window)[0]), ns((*window)[1]));
    // A quarter: a thread here and there waits a little for a CPU on any machine.
    if (!share || *share < 0.25) return;
    anomaly.evidence["cpu_wait_share"] = *share;
    anomaly.message += fmt::format(
        "; its threads waited for a CPU {:.0f} % of that time: the machine's CPUs were taken",
        100 * *share);
    anomaly.suggestion =
        "see what else ran on the machine's CPUs then (other jobs, more DataLoader "
        "workers than CPUs) before the code; then: " +
        anomaly.suggestion;
  }

  void finish() override {
    if (ProbeControl* probes = host_.probes()) {
      for (const ProbeControl::PythonCallCount& c : probes->python_call_counts()) {
        python_.add_call_count(c.pid, c.file_ptr, c.name_ptr, c.count);
      }
    }
    for (const PythonStackChange& change : python_.close_stacks()) {
      for (const auto& sink : host_.sinks()) sink->on_python_stack(change);
    }
    Session& session = host_.session();
    const nlohmann::json figures = python_.figures();
    LayerState& state = session.layers[Layer::kPython];
    for (const auto& [key, value] : figures.items()) state.extra[key] = value;
    std::set<std::string> paths;
    for (const auto& i : figures["interpreters"]) paths.insert(i.value("path", ""));
    state.libraries.assign(paths.begin(), paths.end());
    session.python_gc = python_.gc_events();
  }

  bool mapped() const override { return mapped_; }

 private:
  struct Registration {
    uint64_t runtime = 0;  // the interpreter's _PyRuntime in the process
    uint32_t layout = 0;   // python_layouts.h
  };

  // The sampler stops walking `pid`; false when it was not registered.
  bool unregister(uint32_t pid) {
    if (processes_.erase(pid) == 0) return false;
    if (ProbeControl* probes = host_.probes()) probes->remove_python_process(pid);
    return true;
  }

  // Registers `pid` with the tracer's sampler if one of `files` is a CPython interpreter.
  void find_interpreter(uint32_t pid, const std::vector<MappedFile>& files) {
    ProbeControl* probes = host_.probes();
    if (!probes || processes_.contains(pid)) return;
    if (probes->layer_problem(Layer::kPython)) return;  // its programs did not load: said then
    for (const MappedFile& file : files) {
      if (!file.executable || not_interpreters_.contains(file.id)) continue;
      const std::string path = path_in_root_of(pid, file.path);
      auto interpreter = inspect_interpreter(path);
      if (!interpreter) {
        host_.warn(interpreter.error().message);
        not_interpreters_.insert(file.id);
        continue;
      }
      if (!*interpreter) {
        not_interpreters_.insert(file.id);
        continue;
      }
      const PythonInterpreter& found = **interpreter;
      const std::optional<uint32_t> layout = python_layout_index(found.version);
      if (!layout) {
        host_.warn(
            fmt::format("python layer: {} is CPython {}.{}, whose structures eacgm does not know "
                        "(3.8 to 3.13 are supported); its stacks are not sampled",
                        file.path, found.version / 100, found.version % 100));
        not_interpreters_.insert(file.id);
        return;
      }
      Result<uint64_t> runtime = runtime_address(found, file);
      if (!runtime) {
        host_.warn(fmt::format("python layer: process {}: {}", pid, runtime.error().message));
        return;
      }
      if (auto r = probes->add_python_process(pid, *runtime, *layout); !r) {
        host_.warn(r.error().message);
        return;
      }
      processes_[pid] = {*runtime, *layout};
      mapped_ = true;
      // Function keys are relative to the script's directory: the job's own modules by path.
      std::error_code cwd_error;
      const std::string cwd =
          std::filesystem::read_symlink(fmt::format("/proc/{}/cwd", pid), cwd_error).string();
      python_.add_interpreter({pid, static_cast<int>(found.version), file.path, found.has_usdt,
                               python_script_dir(host_.session().process(pid).cmdline, cwd)});
      if (found.has_usdt) {
        if (auto r = probes->attach_python_usdt(path, count_calls_); !r) {
          host_.warn(r.error().message);
        }
      }
      return;
    }
  }

  LayerHost& host_;
  PythonProfile python_;
  bool count_calls_ = false;                    // count Python calls through USDT
  double rate_hz_ = 0;                          // stack samples per second per thread
  bool mapped_ = false;                         // an interpreter was registered
  std::map<uint32_t, Registration> processes_;  // pid -> where its runtime is
  std::set<FileId> not_interpreters_;           // mapped files that are not CPython
};

}  // namespace

std::unique_ptr<LayerRuntime> make_python_runtime(const LayerRuntimeSetup& setup, LayerHost& host) {
  return std::make_unique<PythonRuntime>(setup, host);
}

}  // namespace eacgm
