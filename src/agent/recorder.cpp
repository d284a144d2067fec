#include "agent/recorder.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <glob.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <time.h>
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
#include "layers/python/python_binary.h"
#include "layers/python/python_layouts.h"
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

// Device files matching comma-separated globs, by kernel dev_t (major << 20
// | minor: what the BPF side reads from the inode).
std::map<uint32_t, std::string> char_devices_matching(const std::string& patterns) {
  std::map<uint32_t, std::string> out;
  std::stringstream ss(patterns);
  std::string pattern;
  while (std::getline(ss, pattern, ',')) {
    if (pattern.empty()) continue;
    glob_t g{};
    if (glob(pattern.c_str(), 0, nullptr, &g) == 0) {
      for (size_t i = 0; i < g.gl_pathc; ++i) {
        struct stat st {};
        if (stat(g.gl_pathv[i], &st) != 0 || !S_ISCHR(st.st_mode)) continue;
        const uint32_t rdev = (major(st.st_rdev) << 20) | minor(st.st_rdev);
        out.try_emplace(rdev, g.gl_pathv[i]);
      }
    }
    globfree(&g);
  }
  return out;
}

uint64_t monotonic_now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
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
  } else if (std::holds_alternative<PySampleEvent>(*event) ||
             std::holds_alternative<PyCodeEvent>(*event) ||
             std::holds_alternative<PyFunctionEvent>(*event) ||
             std::holds_alternative<PyGcEvent>(*event)) {
    on_python_event(*event);
  } else {
    on_os_event(*event);
  }
}

void Recorder::configure_os(OsOptions options) {
  ioctl_devices_ = std::move(options.ioctl_devices);
  os_ = OsMonitor(options.monitor);
}

void Recorder::refresh_ioctl_devices() {
  if (!probes_ || !layers_.contains(Layer::kOs)) return;
  devices_refreshed_ns_ = monotonic_now_ns();
  std::map<uint32_t, std::string> devices = char_devices_matching(ioctl_devices_);
  std::set<uint32_t> numbers;
  for (const auto& [rdev, path] : devices) numbers.insert(rdev);
  if (auto r = probes_->set_ioctl_devices(numbers); !r) warn(r.error().message);
  os_.set_devices(ioctl_devices_, std::move(devices));
}

void Recorder::report(Anomaly anomaly) {
  fmt::print(stderr, "eacgm: anomaly [{}] {}\n", anomaly.kind, anomaly.message);
  session_.anomalies.push_back(std::move(anomaly));
}

void Recorder::on_os_event(const Event& event) {
  os_.set_session_start(session_.start_ns);  // anomalies count seconds from it
  uint32_t pid = 0;
  if (const auto* s = std::get_if<SignalEvent>(&event)) {
    if (!os_.on_signal(*s)) return;  // eacgm's own loader stop and resume
    pid = s->pid;
  } else if (const auto* o = std::get_if<OomKillEvent>(&event)) {
    os_.on_oom_kill(*o);
    pid = o->pid;
  } else if (const auto* m = std::get_if<MmapEvent>(&event)) {
    os_.on_mmap(*m);
    pid = m->pid;
  } else if (const auto* i = std::get_if<IoctlEvent>(&event)) {
    os_.on_ioctl(*i);
    pid = i->pid;
  } else {
    return;
  }
  flight_.add(pid, event);
}

void Recorder::on_python_event(const Event& event) {
  if (const auto* sample = std::get_if<PySampleEvent>(&event)) {
    for (const PythonStackChange& change : python_.on_sample(*sample)) {
      for (auto& sink : sinks_) sink->on_python_stack(change);
    }
  } else if (const auto* code = std::get_if<PyCodeEvent>(&event)) {
    python_.on_code(*code);
  } else if (const auto* function = std::get_if<PyFunctionEvent>(&event)) {
    python_.on_function(*function);
  } else if (const auto* gc = std::get_if<PyGcEvent>(&event)) {
    python_.on_gc(*gc);
    ++session_.events_recorded;
  }
}

void Recorder::find_interpreter(uint32_t pid, const std::vector<MappedFile>& files) {
  if (!probes_ || !layers_.contains(Layer::kPython) || python_processes_.contains(pid)) return;
  if (probes_->layer_problem(Layer::kPython)) return;  // its programs did not load: said then
  for (const MappedFile& file : files) {
    if (!file.executable || not_interpreters_.contains(file.id)) continue;
    const std::string path = path_in_root_of(pid, file.path);
    auto interpreter = inspect_interpreter(path);
    if (!interpreter) {
      warn(interpreter.error().message);
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
      warn(
          fmt::format("python layer: {} is CPython {}.{}, whose structures eacgm does not know "
                      "(3.8 to 3.13 are supported); its stacks are not sampled",
                      file.path, found.version / 100, found.version % 100));
      not_interpreters_.insert(file.id);
      return;
    }
    Result<uint64_t> runtime = runtime_address(found, file);
    if (!runtime) {
      warn(fmt::format("python layer: process {}: {}", pid, runtime.error().message));
      return;
    }
    const uint32_t layout_index = *layout;
    if (auto r = probes_->add_python_process(pid, *runtime, layout_index); !r) {
      warn(r.error().message);
      return;
    }
    python_processes_[pid] = {*runtime, layout_index};
    mapped_layers_.insert(Layer::kPython);
    // Function keys are relative to the script's directory: the job's own modules by path.
    std::error_code cwd_error;
    const std::string cwd =
        std::filesystem::read_symlink(fmt::format("/proc/{}/cwd", pid), cwd_error).string();
    python_.add_interpreter({pid, static_cast<int>(found.version), file.path, found.has_usdt,
                             python_script_dir(session_.process(pid).cmdline, cwd)});
    if (found.has_usdt) {
      if (auto r = probes_->attach_python_usdt(path, python_calls_); !r) warn(r.error().message);
    }
    return;
  }
}

void Recorder::check_libraries(uint32_t pid, const std::vector<MappedFile>& files) {
  std::vector<LibraryBuild> builds;
  for (const MappedFile& file : files) {
    if (!file.executable || !library_family(file.path)) continue;
    auto known = library_builds_.find(file.id);
    if (known == library_builds_.end()) {
      // Read through /proc/PID/root: the target may live in another mount namespace.
      std::optional<LibraryBuild> build =
          identify_library(file.path, file.id, path_in_root_of(pid, file.path));
      if (!build) continue;
      known = library_builds_.emplace(file.id, std::move(*build)).first;
    }
    builds.push_back(known->second);
    builds.back().path = file.path;  // one inode, perhaps several names: this process's
  }
  os_.set_session_start(session_.start_ns);
  os_.on_libraries(pid, builds, monotonic_now_ns());
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
  const std::string path = out_dir_ + "/" + relative;
  std::error_code ec;
  std::filesystem::create_directories(out_dir_ + "/flight_recorder", ec);
  if (auto written = write_file_atomically(
          path,
          json_text(flight_.report(*proc, session_.start_ns, os_.activity().devices), 2) + '\n');
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
    entry.collective = collectives_.on_begin(event, &proc);
    for (auto& sink : sinks_) sink->on_entry(entry);
    return;
  }
  CallRecord call = event;
  if (call.py_code != 0) call.py_site = python_.site(call.pid, call.py_code, call.py_instr);
  call.kernel = session_.kernels.kernel_of(call);
  if (layers_.contains(Layer::kOs)) {
    os_.on_traced_call(call.pid, call.tid, call.start_ns, call.start_ns + call.duration_ns);
  }
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
  if (layers_.contains(Layer::kPython)) {
    python_.note_traced_call(call.pid, call.tid, call.start_ns, call.duration_ns);
  }
  if (call.layer() == Layer::kNccl) {
    call.collective = collectives_.on_end(call, &proc);
    if (call.spec->role == CallRole::kCommInit && !call.failed() && !proc.rank) {
      proc.rank = static_cast<int32_t>(call.raw.word(call.spec->rank_slot));
    }
  }
  ++session_.events_recorded;
  session_.add_call(call);
  if (call.layer() == Layer::kTorch) torch_threads_.on_op(call);
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
  os_.on_process(pid, proc.comm, start_ns);
  attach_mapped_libraries(pid);
}

void Recorder::attach_mapped_libraries(uint32_t pid) {
  if (!probes_) return;
  auto files = mapped_files(pid);
  if (!files) return;  // it exited meanwhile; its exit event tells the rest
  if (layers_.contains(Layer::kOs)) check_libraries(pid, *files);
  find_interpreter(pid, *files);
  std::set<Layer> needed;  // loaded together: each object's verification takes a while
  for (const MappedFile& file : *files) {
    const std::optional<Layer> layer = library_layer(file.path);
    if (file.executable && layer && layers_.contains(*layer)) needed.insert(*layer);
  }
  // Before the unwind guard below: it is the torch layer's program, placed once libtorch is.
  if (auto loaded = probes_->load_layers(needed); !loaded) warn(loaded.error().message);
  for (const MappedFile& file : *files) {
    if (!file.executable) continue;
    if (layers_.contains(Layer::kTorch) && is_unwinder_library(file.path)) {
      auto guarded = probes_->attach_unwind_guard(path_in_root_of(pid, file.path));
      if (!guarded) warn(guarded.error().message);
      continue;
    }
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
      os_.on_process(event.pid, child.comm, event.ts_ns);
      flight_.add(event.pid, Event{event});
      // A fork runs its parent's interpreter at the same addresses.
      if (auto parent = python_processes_.find(event.ppid); parent != python_processes_.end()) {
        const PythonRegistration reg = parent->second;
        if (auto r = probes_->add_python_process(event.pid, reg.runtime, reg.layout); r) {
          python_processes_[event.pid] = reg;
          python_.on_fork(event.ppid, event.pid);
        } else {
          warn(r.error().message);
        }
      }
      break;
    }
    case ProcEvent::Kind::kExec:
      if (python_processes_.erase(event.pid) > 0) {  // its interpreter is gone with its image
        probes_->remove_python_process(event.pid);
        python_.forget(event.pid);
      }
      session_.process(event.pid).execed = true;
      session_.process(event.pid).rank.reset();
      session_.process(event.pid).world_size.reset();
      refresh_identity(event.pid);
      os_.on_process(event.pid, session_.process(event.pid).comm, event.ts_ns);
      flight_.add(event.pid, Event{event});
      break;
    case ProcEvent::Kind::kExit: {
      ProcessInfo& proc = session_.process(event.pid);
      if (proc.comm.empty()) proc.comm = event.comm;
      proc.end_ns = event.ts_ns;
      analysis_.end_process(event.pid, event.ts_ns);
      // The wait status says how; the os layer's signals and OOM kills say why.
      proc.exit = os_.explain(event.pid, describe_exit_status(event.status));
      os_.on_process_exit(event.pid);
      stopped_.erase(event.pid);
      if (python_processes_.erase(event.pid) > 0) probes_->remove_python_process(event.pid);
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
  collectives_.note_pause(pid, it->second, now);
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
  if (const ProcessInfo* proc = session_.find_process(pid)) {
    for (const auto& [tid, name] : proc->threads) session_.torch_nesting.forget_thread(tid);
  }
  torch_threads_.forget(pid);
  session_.processes.erase(pid);
  session_.device_memory.erase(pid);
  flight_.forget(pid);
  leaks_.forget(pid);
  analysis_.forget(pid);
  stopped_.erase(pid);
  collectives_.forget_process(pid);
  os_.forget_process(pid);
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
  // GPU readings and XIDs queued by the sampler's threads since the last tick.
  if (gpu_) gpu_->poll(session_, sinks_, [this](Anomaly a) { report(std::move(a)); });
  // Trends need time to show: the leak check runs once a second and at the end.
  if (final || now_ns >= leaks_checked_ns_ + 1'000'000'000) {
    leaks_checked_ns_ = now_ns;
    for (Anomaly& a : leaks_.check(session_.start_ns)) report(std::move(a));
  }
  cycle(now_ns, final);
  // Windows close a second at a time; the detectors learn each worker's warm-up, then score.
  analysis_.set_session_start(session_.start_ns);
  for (Anomaly& a : final ? analysis_.finish(now_ns) : analysis_.advance(now_ns)) {
    note_cpu_waits(a);
    report(std::move(a));
  }
  if (final) session_.window_workers = analysis_.report();
  if (layers_.contains(Layer::kOs)) {
    os_.set_session_start(session_.start_ns);
    for (Anomaly& a : os_.take_anomalies(final ? OsMonitor::kReleaseAll : now_ns)) {
      report(std::move(a));
    }
    if (now_ns >= devices_refreshed_ns_ + 1'000'000'000) refresh_ioctl_devices();
  }
  if (layers_.contains(Layer::kPython)) {
    for (Anomaly& a : python_.take_anomalies(session_, now_ns, final)) report(std::move(a));
  }
  if (!layers_.contains(Layer::kNccl)) return;
  collectives_.set_session_start(session_.start_ns);
  for (Anomaly& a : collectives_.check(now_ns)) report(std::move(a));
  for (const CollectiveTracker::HangResolution& r : collectives_.take_resolutions()) {
    resolve_hang(r);
  }
}

void Recorder::note_cpu_waits(Anomaly& anomaly) const {
  const auto window = anomaly.evidence.find("window_s");
  if (!layers_.contains(Layer::kPython) || !anomaly.pid || window == anomaly.evidence.end() ||
      !window->is_array() || window->size() != 2) {
    return;
  }
  auto ns = [this](const nlohmann::json& s) {
    return session_.start_ns + static_cast<uint64_t>(std::max(0.0, s.get<double>()) * 1e9);
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

void Recorder::resolve_hang(const CollectiveTracker::HangResolution& resolution) {
  for (Anomaly& a : session_.anomalies) {
    if (a.kind != "hang" || a.evidence.value("communicator", "") != resolution.communicator ||
        a.evidence.value("seq", uint64_t{0}) != resolution.seq ||
        a.evidence.contains("resolved_after_s")) {
      continue;
    }
    a.evidence["resolved_after_s"] = resolution.waited_s;
    a.message +=
        fmt::format("; it moved on after {:.1f} s: a stall, not a hang", resolution.waited_s);
    fmt::print(stderr, "eacgm: anomaly [hang] resolved: {}\n", a.message);
    return;
  }
}

std::vector<std::string> Recorder::finish_sinks() {
  if (layers_.contains(Layer::kTorch)) {
    session_.layers[Layer::kTorch].extra["threads"] = torch_threads_.finish(session_);
  }
  if (layers_.contains(Layer::kNccl)) {
    session_.layers[Layer::kNccl].extra["ranks"] = collectives_.rank_figures();
    session_.layers[Layer::kNccl].extra["open_collectives"] = collectives_.open_collectives();
  }
  if (layers_.contains(Layer::kOs)) {
    for (Anomaly& a : os_.take_anomalies()) report(std::move(a));
    session_.os = os_.activity();
    const nlohmann::json figures = os_.figures();
    for (const auto& [key, value] : figures.items()) session_.layers[Layer::kOs].extra[key] = value;
  }
  if (layers_.contains(Layer::kPython)) {
    if (probes_) {
      for (const ProbeControl::PythonCallCount& c : probes_->python_call_counts()) {
        python_.add_call_count(c.pid, c.file_ptr, c.name_ptr, c.count);
      }
    }
    for (const PythonStackChange& change : python_.close_stacks()) {
      for (auto& sink : sinks_) sink->on_python_stack(change);
    }
    const nlohmann::json figures = python_.figures();
    LayerState& state = session_.layers[Layer::kPython];
    for (const auto& [key, value] : figures.items()) state.extra[key] = value;
    std::set<std::string> paths;
    for (const auto& i : figures["interpreters"]) paths.insert(i.value("path", ""));
    state.libraries.assign(paths.begin(), paths.end());
    session_.python_gc = python_.gc_events();
  }
  if (gpu_) gpu_->finish(session_, sinks_, [this](Anomaly a) { report(std::move(a)); });
  std::vector<std::string> errors;
  for (auto& sink : sinks_) {
    if (auto r = sink->finish(session_); !r) errors.push_back(r.error().message);
  }
  return errors;
}

}  // namespace eacgm
