#include "agent/agent_runtime.h"

#include <fmt/format.h>
#include <time.h>
#include <unistd.h>

#include "agent/privileges.h"
#include "common/exit_codes.h"
#include "probes/library_finder.h"

namespace eacgm {

LoopSignals::LoopSignals(std::initializer_list<int> signals) {
  sigemptyset(&set_);
  for (int sig : signals) sigaddset(&set_, sig);
  sigprocmask(SIG_BLOCK, &set_, &previous_);
  fd_ = signalfd(-1, &set_, SFD_CLOEXEC | SFD_NONBLOCK);
}

LoopSignals::~LoopSignals() {
  if (fd_ >= 0) close(fd_);
  const timespec now{};
  while (sigtimedwait(&set_, nullptr, &now) > 0) {
  }
  sigprocmask(SIG_SETMASK, &previous_, nullptr);
}

namespace {

// The os layer leaves out the signals of eacgm's own loader stops: those this process sends.
AgentMode with_own_pid(AgentMode mode) {
  mode.os_monitor.self_pid = static_cast<uint32_t>(getpid());
  return mode;
}

}  // namespace

AgentRuntime::AgentRuntime(AgentOptions options, AgentMode mode)
    : options_(std::move(options)),
      mode_(with_own_pid(std::move(mode))),
      recorder_(session_, options_.layers, options_, mode_) {}

std::optional<int> AgentRuntime::open() {
  const Privileges privileges = current_privileges();
  if (!privileges.sufficient()) return fail(kExitUsage, privileges.explain());
  auto torch_ops = TorchOpFilter::parse(options_.torch_ops);
  if (!torch_ops) return fail(kExitUsage, torch_ops.error().message);
  // A budget weighs calls by what they cost from the first one: known before anything runs.
  if (options_.overhead_budget_pct) {
    if (auto problem = overhead_.prepare_budget()) return fail(kExitUsage, *problem);
  }
  if (mode_.trap_cost_at_start) overhead_.measure_trap_cost();  // ~0.1 s, then cached a boot

  session_.version = EACGM_VERSION;
  session_.keep_durations = mode_.keep_durations;
  session_.realtime_offset_ns = realtime_offset_ns();
  session_.start_ns = monotonic_ns();
  if (!mode_.output_dir.empty()) recorder_.set_output_dir(mode_.output_dir);

  std::set<Layer> bpf_layers;
  std::vector<std::string> notice;
  for (Layer layer : options_.layers) {
    const LayerInfo& info = layer_info(layer);
    if (info.source == LayerSource::kUserSpace) continue;  // read from user space: no BPF
    bpf_layers.insert(layer);
    if (mode_.notice_libraries)
      notice.insert(notice.end(), info.libraries.begin(), info.libraries.end());
  }
  auto tracer = Tracer::open({.layers = bpf_layers,
                              .stop_on_dlopen = options_.stop_on_dlopen,
                              .btf_path = options_.btf_path,
                              .verbose = options_.verbose,
                              .torch_ops = std::move(*torch_ops),
                              .duty_cycle = options_.overhead_budget_pct.has_value(),
                              .notice_libraries = std::move(notice),
                              .notice_cgroup_dir = mode_.notice_cgroup_dir},
                             [this](std::span<const std::byte> d) { recorder_.handle(d); });
  if (!tracer) return fail(kExitUsage, tracer.error().message);
  tracer_ = std::move(*tracer);
  recorder_.set_probes(tracer_.get());
  if (options_.overhead_budget_pct) {
    recorder_.set_overhead_budget({.budget = *options_.overhead_budget_pct / 100},
                                  session_.start_ns,
                                  [this] { return overhead_.call_costs_ns(*tracer_); });
  }
  for (const std::string& warning : tracer_->warnings()) {
    fmt::print(stderr, "eacgm: warning: {}\n", warning);
  }
  // A layer whose programs the tracer loads at once (its tracepoints) and could not: said now.
  // Those loaded with their first library or interpreter say so then.
  for (Layer layer : options_.layers) {
    if (auto problem = tracer_->layer_problem(layer)) {
      fmt::print(stderr, "eacgm: warning: the {} layer is unavailable: {}\n", layer_name(layer),
                 *problem);
    }
  }
  recorder_.start_layers();
  return std::nullopt;
}

void AgentRuntime::begin() {
  // The notice of new processes stops them at the loader too: serve needs the probe either way.
  if (options_.stop_on_dlopen || mode_.notice_libraries) {
    if (auto r = tracer_->attach_loader(kLoaderPath); !r) {
      fmt::print(stderr, "eacgm: warning: {}; libraries loaded later may be missed\n",
                 r.error().message);
    }
  }
}

void AgentRuntime::stop() {
  recorder_.resume_stopped_targets();
  tracer_->drain();
  tracer_->detach_probes();
  recorder_.resume_stopped_targets();  // stopped between the first resume and the detach
  tracer_->drain();
}

void AgentRuntime::settle_layer_statuses() {
  for (Layer layer : options_.layers) {
    const LayerInfo& info = layer_info(layer);
    LayerState& state = session_.layers[layer];
    const std::optional<std::string> problem = tracer_->layer_problem(layer);
    switch (info.source) {
      case LayerSource::kUserSpace:  // its reader says (GpuLayer::finish, from finish_sinks())
        continue;
      case LayerSource::kTracepoints:  // no library to find
        state.status = problem ? LayerStatus::kUnavailable : LayerStatus::kActive;
        state.reason = problem.value_or("");
        continue;
      case LayerSource::kInterpreters:  // not a library of a known name
        if (problem) {
          // Its programs did not load when the first interpreter was found.
          state.status = LayerStatus::kUnavailable;
          state.reason = *problem;
        } else if (recorder_.layer_mapped(layer)) {
          state.status = LayerStatus::kActive;  // its interpreters: set by finish_sinks()
          state.reason.clear();
        } else {
          state.status = LayerStatus::kUnavailable;
          state.reason = "no traced process runs a CPython interpreter (3.8 to 3.13)";
        }
        continue;
      case LayerSource::kLibraries:
        settle_library_layer(info, state, problem);
        continue;
    }
  }
}

void AgentRuntime::settle_library_layer(const LayerInfo& info, LayerState& state,
                                        const std::optional<std::string>& problem) {
  state.libraries.clear();
  for (const TracedLibrary& lib : tracer_->libraries()) {
    // Probed through /proc/PID/root; named as the job knows the file.
    if (lib.layer == info.id) state.libraries.emplace_back(path_seen_by_process(lib.path));
  }
  const std::string_view prefix = info.libraries.empty() ? info.name : info.libraries.front();
  // Probes on a library of the search path prove nothing: the job may never load it.
  state.loaded_by_job = recorder_.layer_mapped(info.id) || !state.calls.empty();
  state.reason.clear();
  if (problem) {
    // Its programs did not load when its first library was to be probed.
    state.status = LayerStatus::kUnavailable;
    state.reason = *problem;
    state.libraries.clear();
  } else if (state.libraries.empty()) {
    state.status = LayerStatus::kUnavailable;
    state.reason = options_.stop_on_dlopen
                       ? fmt::format("no traced process loaded {}", prefix)
                       : fmt::format(
                             "no {} library was found in the traced processes or on their "
                             "library search path",
                             prefix);
  } else if (!info.inactive_unless_mapped.empty() && !state.loaded_by_job) {
    state.status = LayerStatus::kUnavailable;
    state.reason =
        fmt::format("no traced process loaded {} ({})", prefix, info.inactive_unless_mapped);
    state.libraries.clear();
  } else {
    state.status = LayerStatus::kActive;
  }
}

TracingOverhead AgentRuntime::overhead(uint64_t now_ns) {
  TracingOverhead overhead = overhead_.read(*tracer_);
  overhead.pauses = recorder_.pauses();
  overhead.duty_cycle = recorder_.duty_cycle_figures(now_ns);
  return overhead;
}

}  // namespace eacgm
