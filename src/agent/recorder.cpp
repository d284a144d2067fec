#include "agent/recorder.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <utility>

#include "common/atomic_file.h"
#include "common/clock.h"
#include "common/json_text.h"
#include "layers/torch/unwind_stop.h"
#include "probes/library_finder.h"
#include "reader/decoder.h"

namespace eacgm {
namespace {

std::string read_small_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string trim_newline(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\0')) s.pop_back();
  return s;
}

std::vector<std::string> split_nul(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start < s.size()) {
    size_t end = s.find('\0', start);
    if (end == std::string::npos) end = s.size();
    out.push_back(s.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

// At most this many flight recorder files per session: a job whose workers
// fail by the thousand must not fill the disk.
constexpr size_t kMaxFlightFiles = 1000;

}  // namespace

ProcessExit describe_exit_status(int status) {
  ProcessExit exit;
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    exit.signal = sig;
    exit.core_dumped = WCOREDUMP(status);
    const char* abbrev = sigabbrev_np(sig);
    exit.cause = fmt::format("killed by SIG{} ({}){}", abbrev ? abbrev : std::to_string(sig),
                             strsignal(sig), exit.core_dumped ? ", core dumped" : "");
  } else {
    exit.code = WEXITSTATUS(status);
    exit.cause =
        *exit.code == 0 ? "exited normally" : fmt::format("exited with code {}", *exit.code);
  }
  return exit;
}

Recorder::Recorder(Session& session, std::set<Layer> layers, const AgentOptions& options,
                   const AgentMode& mode)
    : session_(session), layers_(std::move(layers)) {
  analysis_.set_lookup([this](uint32_t pid) {
    const ProcessInfo* p = session_.find_process(pid);
    return p ? EntityInfo{p->rank, p->comm, std::string(process_role(session_, *p))} : EntityInfo{};
  });
  runtimes_ = make_layer_runtimes(layers_, {.options = options, .mode = mode}, *this);
}

void Recorder::start_layers() {
  for (auto& [layer, runtime] : runtimes_) runtime->start();
}

const LayerRuntime* Recorder::runtime_of(Layer layer) const {
  for (const auto& [id, runtime] : runtimes_) {
    if (id == layer) return runtime.get();
  }
  return nullptr;
}

bool Recorder::layer_mapped(Layer layer) const {
  const LayerRuntime* runtime = runtime_of(layer);
  return mapped_layers_.contains(layer) || (runtime && runtime->mapped());
}

std::optional<std::string> Recorder::layer_unavailable(Layer layer) const {
  const LayerRuntime* runtime = runtime_of(layer);
  return runtime ? runtime->unavailable() : std::nullopt;
}

// Said once, on stderr, as it happens: nothing is kept (serve runs for months).
void Recorder::warn(std::string message) { fmt::print(stderr, "eacgm: warning: {}\n", message); }

void Recorder::handle(std::span<const std::byte> data) {
  auto event = decode_event(data, probes_ ? &probes_->torch_ops() : nullptr);
  if (!event) {
    if (session_.events_undecodable++ == 0) warn(event.error().message);
    return;
  }
  if (auto* call = std::get_if<CallRecord>(&*event)) {
    if (passed_over_.contains(call->pid)) return;
    on_call(*call);
  } else if (auto* named = std::get_if<HandleNameEvent>(&*event)) {
    if (!named->failed()) session_.kernels.name_handle(named->pid, named->handle, named->name);
  } else if (auto* proc = std::get_if<ProcEvent>(&*event)) {
    on_process_event(*proc);
  } else {
    for (auto& [layer, runtime] : runtimes_) {
      if (runtime->on_event(*event)) return;  // the layer's own record (os, python)
    }
  }
}

void Recorder::report(Anomaly anomaly) {
  fmt::print(stderr, "eacgm: anomaly [{}] {}\n", anomaly.kind, anomaly.message);
  session_.anomalies.push_back(std::move(anomaly));
}

void Recorder::lose_flight_recorder(const std::string& relative, std::string error) {
  // A session output like the others: summary.json's `lost` says so, beside the sinks' losses.
  session_.lost.push_back({.output = relative, .calls = 0, .calls_lost = 0, .error = error});
  warn(std::move(error));
}

void Recorder::write_flight_recorder(uint32_t pid) {
  const ProcessInfo* proc = session_.find_process(pid);
  if (out_dir_.empty() || !proc || flight_files_ >= kMaxFlightFiles) return;
  const std::string relative = fmt::format("flight_recorder/{}.json", pid);
  std::map<uint32_t, std::string> device_names;  // its ioctls' devices, by the layers that know
  for (const auto& [layer, runtime] : runtimes_) {
    if (const auto* names = runtime->device_names())
      device_names.insert(names->begin(), names->end());
  }
  const std::string path = out_dir_ + "/" + relative;
  std::error_code ec;
  std::filesystem::create_directories(out_dir_ + "/flight_recorder", ec);
  if (auto written = write_file_atomically(
          path, json_text(flight_.report(*proc, session_.start_ns, device_names), 2) + '\n');
      !written) {
    lose_flight_recorder(relative, written.error().message);
    return;
  }
  ++flight_files_;
  session_.process(pid).flight_recorder = relative;
}

void Recorder::set_overhead_budget(DutyCycle::Options options, uint64_t start_ns,
                                   CallCosts call_costs) {
  duty_.emplace(options, start_ns);
  call_costs_ = std::move(call_costs);
  session_.duty_cycled = true;
}

std::optional<DutyCycleFigures> Recorder::duty_cycle_figures(uint64_t now_ns) const {
  if (!duty_) return std::nullopt;
  return duty_->figures(now_ns);
}

void Recorder::cycle(uint64_t now_ns, bool final) {
  if (!duty_) return;
  if (call_costs_ && (call_costs_read_ns_ == 0 || now_ns >= call_costs_read_ns_ + 1'000'000'000)) {
    call_cost_ns_ = call_costs_();
    call_costs_read_ns_ = now_ns;
  }
  if (final) {
    const DutyCycleFigures f = duty_->figures(now_ns);
    for (Layer layer : layers_) {
      if (!layer_info(layer).duty_cycled) continue;
      session_.layers[layer].traced_fraction = f.traced_fraction;
      session_.layers[layer].count_scale = f.count_scale;
    }
    return;
  }
  const bool was_on = duty_->on();
  const bool on = duty_->tick(now_ns);
  if (!budget_warned_ && duty_->always_traced_slowdown() > duty_->budget()) {
    budget_warned_ = true;
    warn(fmt::format(
        "--overhead-budget {:.3g} % cannot hold: the calls traced all the time (allocations, "
        "frees, NCCL, kernel names) alone cost a traced process {:.2f} % of its time; the "
        "frequent calls are now traced {:.0f} % of the time",
        100 * duty_->budget(), 100 * duty_->always_traced_slowdown(),
        100 * DutyCycle::kMinFraction));
  }
  if (on == was_on) return;
  if (on) {
    analysis_.end_untraced(now_ns);
  } else {
    analysis_.add_untraced(now_ns);
  }
  if (!probes_) return;
  if (auto r = probes_->set_cycled_probes(on); !r) {
    warn(fmt::format("--overhead-budget: cannot {} the sampled probes: {}",
                     on ? "attach" : "release", r.error().message));
  }
}

void Recorder::on_call(const CallRecord& event) {
  ProcessInfo& proc = session_.process(event.pid);
  if (duty_ && event.finished) {
    const auto cost = call_cost_ns_.find(event.layer());
    if (cost != call_cost_ns_.end()) {
      duty_->on_call(event.pid, cost->second, may_duty_cycle(*event.spec));
    }
  }
  flight_.add(event.pid, Event{event});
  if (!event.finished) {
    CallRecord entry = event;
    for (auto& [layer, runtime] : runtimes_) runtime->on_call_entry(entry, proc);
    for (auto& sink : sinks_) sink->on_entry(entry);
    return;
  }
  CallRecord call = event;
  for (auto& [layer, runtime] : runtimes_) runtime->on_call(call, proc);
  call.kernel = session_.kernels.kernel_of(call);
  if (call.inner) {
    // NVIDIA's runtime running on the driver: part of the runtime call around it. Shown nested
    // in the timeline and kept in the database, never a second launch, allocation or sample.
    session_.kernels.on_call(call);
    auto& inner = session_.layers[call.layer()].inner_calls;
    auto it = inner.find(call.name());
    if (it == inner.end()) it = inner.emplace(std::string(call.name()), 0).first;
    ++it->second;
    ++session_.events_recorded;
    for (auto& sink : sinks_) sink->on_call(call);
    return;
  }
  ++session_.events_recorded;
  session_.add_call(call);
  const bool memory_event = !call.failed() && (call.spec->memory == MemoryEffect::kDeviceAlloc ||
                                               call.spec->memory == MemoryEffect::kDeviceFree);
  if (memory_event) {
    leaks_.on_memory(call.pid, call.start_ns + call.duration_ns,
                     session_.device_memory[call.pid].outstanding_bytes);
  }
  const auto memory = session_.device_memory.find(call.pid);
  analysis_.on_call({.pid = call.pid,
                     .layer = call.layer(),
                     .name = call.name(),
                     .api_class = call.spec->api_class,
                     .start_ns = call.start_ns,
                     .duration_ns = call.duration_ns,
                     .bytes = call.bytes(),
                     .failed = call.failed(),
                     .outstanding_bytes = memory == session_.device_memory.end()
                                              ? 0
                                              : memory->second.outstanding_bytes,
                     .memory_event = memory_event});
  if (!proc.threads.contains(call.tid)) {
    std::string name =
        trim_newline(read_small_file(fmt::format("/proc/{}/task/{}/comm", call.pid, call.tid)));
    proc.threads.emplace(call.tid, name.empty() ? proc.comm : name);
  }
  for (auto& sink : sinks_) sink->on_call(call);
}

void Recorder::refresh_identity(uint32_t pid) {
  ProcessInfo& proc = session_.process(pid);
  std::string comm = trim_newline(read_small_file(fmt::format("/proc/{}/comm", pid)));
  if (!comm.empty()) proc.comm = comm;
  std::vector<std::string> cmdline =
      split_nul(read_small_file(fmt::format("/proc/{}/cmdline", pid)));
  if (!cmdline.empty()) proc.cmdline = std::move(cmdline);
  if (auto env = process_environment(pid)) {
    auto number = [&env](const char* name) -> std::optional<int> {
      auto it = env->find(name);
      if (it == env->end()) return std::nullopt;
      try {
        return std::stoi(it->second);
      } catch (const std::exception&) {
        return std::nullopt;  // a value that is not a number names nothing
      }
    };
    if (auto rank = number("RANK")) proc.rank = rank;
    if (auto size = number("WORLD_SIZE")) proc.world_size = size;
  }
}

void Recorder::watch_process(uint32_t pid, uint64_t start_ns) {
  ProcessInfo& proc = session_.process(pid);
  proc.start_ns = start_ns;
  refresh_identity(pid);
  for (auto& [layer, runtime] : runtimes_) runtime->on_process_start(pid, proc, start_ns);
  attach_mapped_libraries(pid);
}

void Recorder::attach_mapped_libraries(uint32_t pid) {
  if (!probes_) return;
  auto files = mapped_files(pid);
  if (!files) return;      // it exited meanwhile; its exit event tells the rest
  std::set<Layer> needed;  // loaded together: each object's verification takes a while
  for (const MappedFile& file : *files) {
    const std::optional<Layer> layer = library_layer(file.path);
    if (file.executable && layer && layers_.contains(*layer)) needed.insert(*layer);
  }
  // Before the runtimes look: the torch layer's unwind guard is a program of its object.
  if (auto loaded = probes_->load_layers(needed); !loaded) warn(loaded.error().message);
  for (auto& [layer, runtime] : runtimes_) runtime->on_mapped_files(pid, *files);
  for (const MappedFile& file : *files) {
    if (!file.executable) continue;
    const std::optional<Layer> layer = library_layer(file.path);
    if (!layer || !layers_.contains(*layer)) continue;
    mapped_layers_.insert(*layer);
    // Through /proc/PID/root so a target in another mount namespace works too.
    const std::string path = path_in_root_of(pid, file.path);
    auto attached = probes_->attach_library(*layer, path);
    if (!attached) warn(attached.error().message);
  }
}

void Recorder::attach_search_path_libraries(const std::map<std::string, std::string>& env) {
  if (!probes_) return;
  const std::vector<std::string> dirs = library_search_dirs(env);
  std::vector<std::pair<Layer, std::string>> found;
  std::set<Layer> needed;  // loaded together: each object's verification takes a while
  for (Layer layer : layers_) {
    for (std::string_view prefix : layer_info(layer).libraries) {
      for (std::string& path : find_library_files(prefix, dirs)) {
        found.emplace_back(layer, std::move(path));
        needed.insert(layer);
      }
    }
  }
  if (auto loaded = probes_->load_layers(needed); !loaded) warn(loaded.error().message);
  for (const auto& [layer, path] : found) {
    auto attached = probes_->attach_library(layer, path);
    if (!attached) warn(attached.error().message);
  }
}

void Recorder::on_process_event(const ProcEvent& event) {
  if (passed_over_.contains(event.pid)) {
    if (event.kind == ProcEvent::Kind::kLoaderStop) resume(event.pid);  // it waits all the same
    if (event.kind != ProcEvent::Kind::kUnwindStop) return;  // that one is answered below
  }
  if (event.kind == ProcEvent::Kind::kFork && passed_over_.contains(event.ppid)) {
    pass_over(event.pid);  // made a target by its parent's brief targethood: not ours either
    return;
  }
  switch (event.kind) {
    case ProcEvent::Kind::kFork: {
      ProcessInfo& child = session_.process(event.pid);
      child.ppid = event.ppid;
      child.forked = true;
      child.start_ns = event.ts_ns;
      child.comm = event.comm;
      if (const ProcessInfo* parent = session_.find_process(event.ppid)) {
        child.cmdline = parent->cmdline;
        child.rank = parent->rank;
        child.world_size = parent->world_size;
      }
      for (auto& [layer, runtime] : runtimes_) {
        runtime->on_process_start(event.pid, child, event.ts_ns);
        runtime->on_fork(event.ppid, event.pid);
      }
      flight_.add(event.pid, Event{event});
      break;
    }
    case ProcEvent::Kind::kExec: {
      ProcessInfo& proc = session_.process(event.pid);
      proc.execed = true;
      proc.rank.reset();
      proc.world_size.reset();
      refresh_identity(event.pid);
      for (auto& [layer, runtime] : runtimes_) {
        runtime->on_exec(event.pid);
        runtime->on_process_start(event.pid, proc, event.ts_ns);
      }
      flight_.add(event.pid, Event{event});
      break;
    }
    case ProcEvent::Kind::kExit: {
      ProcessInfo& proc = session_.process(event.pid);
      if (proc.comm.empty()) proc.comm = event.comm;
      proc.end_ns = event.ts_ns;
      analysis_.end_process(event.pid, event.ts_ns);
      // The wait status says how; a layer may say why (the os layer: the signal, the OOM kill).
      proc.exit = describe_exit_status(event.status);
      for (auto& [layer, runtime] : runtimes_) runtime->on_exit(event.pid, proc);
      stopped_.erase(event.pid);
      flight_.add(event.pid, Event{event});
      if (proc.exit->abnormal()) write_flight_recorder(event.pid);
      flight_.forget(event.pid);
      break;
    }
    case ProcEvent::Kind::kUnwindStop:
      // The target is stopped as a thread begins to unwind through return probes: put the
      // return addresses back (layers/torch/unwind_stop.h) before it goes on.
      stopped_.try_emplace(event.pid, event.ts_ns);
      if (auto restored = restore_return_addresses(event.pid, event.return_slots); !restored) {
        warn(restored.error().message);
      }
      flight_.add(event.pid, Event{event});
      unwinding_.insert(event.pid);  // resumed by tick()
      break;
    case ProcEvent::Kind::kLoaderStop:
      // The target is stopped right after ld.so mapped new objects: probe
      // them before their first instruction runs, then let it go.
      stopped_.try_emplace(event.pid, event.ts_ns);
      attach_mapped_libraries(event.pid);
      resume(event.pid);
      break;
    case ProcEvent::Kind::kNotice:
      // Not a target until now: it is one in the kernel already, stopped after ld.so mapped a
      // traced library. Taken, it is followed from its first call; else it is left alone.
      stopped_.try_emplace(event.pid, event.ts_ns);
      if (!notice_ || !notice_(event.pid, event.ts_ns)) pass_over(event.pid);
      resume(event.pid);
      break;
  }
}

void Recorder::resume(uint32_t pid) {
  auto it = stopped_.find(pid);
  if (kill(static_cast<pid_t>(pid), SIGCONT) != 0 && errno != ESRCH) return;
  if (it == stopped_.end()) return;
  // From the stop the probe asked for to the SIGCONT: the job waited that long for eacgm.
  const uint64_t now = monotonic_ns();
  const uint64_t paused = now > it->second ? now - it->second : 0;
  ++pauses_.count;
  pauses_.total_ns += paused;
  pauses_.longest_ns = std::max(pauses_.longest_ns, paused);
  for (auto& [layer, runtime] : runtimes_) runtime->on_pause(pid, it->second, now);
  stopped_.erase(it);
}

void Recorder::pass_over(uint32_t pid) {
  constexpr size_t kRemembered = 4096;
  if (probes_) probes_->pass_over(pid);
  if (!passed_over_.insert(pid).second) return;
  passed_over_order_.push_back(pid);
  if (passed_over_order_.size() > kRemembered) {
    passed_over_.erase(passed_over_order_.front());
    passed_over_order_.pop_front();
  }
}

void Recorder::resume_stopped_targets() {
  while (!stopped_.empty()) {
    const uint32_t pid = stopped_.begin()->first;
    resume(pid);
    stopped_.erase(pid);  // not a target any more (EPERM): nothing to wait for
  }
  unwinding_.clear();
}

size_t Recorder::live_processes() const {
  size_t n = 0;
  for (const auto& [pid, proc] : session_.processes) {
    if (!proc.exit && kill(static_cast<pid_t>(pid), 0) == 0) ++n;
  }
  return n;
}

void Recorder::forget_process(uint32_t pid) {
  for (auto& [layer, runtime] : runtimes_) runtime->forget(pid);  // before its session entry goes
  session_.processes.erase(pid);
  session_.device_memory.erase(pid);
  flight_.forget(pid);
  leaks_.forget(pid);
  analysis_.forget(pid);
  stopped_.erase(pid);
}

void Recorder::tick(uint64_t now_ns, bool final) {
  // Targets stopped for unwinding go on only after one more drain: another of their threads
  // that began to unwind before the stop reached it has sent its own stop event by then (it
  // cannot start anew once stopping), and a SIGCONT cancels any stop still pending.
  if (probes_ && !unwinding_.empty()) {
    probes_->drain();
    for (uint32_t pid : std::exchange(unwinding_, {})) {
      resume(pid);
    }
  }
  // Trends need time to show: the leak check runs once a second and at the end.
  if (final || now_ns >= leaks_checked_ns_ + 1'000'000'000) {
    leaks_checked_ns_ = now_ns;
    for (Anomaly& a : leaks_.check(session_.start_ns)) report(std::move(a));
  }
  cycle(now_ns, final);
  // Windows close a second at a time; the detectors learn each worker's warm-up, then score.
  analysis_.set_session_start(session_.start_ns);
  for (Anomaly& a : final ? analysis_.finish(now_ns) : analysis_.advance(now_ns)) {
    for (const auto& [layer, runtime] : runtimes_) runtime->explain_window(a);
    report(std::move(a));
  }
  if (final) session_.window_workers = analysis_.report();
  for (auto& [layer, runtime] : runtimes_) runtime->tick(now_ns, final);
}

std::vector<std::string> Recorder::finish_sinks() {
  for (auto& [layer, runtime] : runtimes_) runtime->finish();
  std::vector<std::string> errors;
  for (auto& sink : sinks_) {
    if (auto r = sink->finish(session_); !r) errors.push_back(r.error().message);
  }
  return errors;
}

}  // namespace eacgm
