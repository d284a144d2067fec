#include "agent/trace_session.h"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

#include "agent/overhead_meter.h"
#include "agent/privileges.h"
#include "agent/recorder.h"
#include "agent/session_dir.h"
#include "common/clock.h"
#include "gpu/gpu_layer.h"
#include "probes/tracer.h"
#include "sinks/async_sinks.h"
#include "sinks/perfetto_writer.h"
#include "sinks/sqlite_writer.h"
#include "sinks/summary.h"

extern char** environ;

namespace eacgm {
namespace {

std::map<std::string, std::string> own_environment() {
  std::map<std::string, std::string> env;
  for (char** e = environ; e && *e; ++e) {
    std::string_view kv(*e);
    const size_t eq = kv.find('=');
    if (eq != std::string_view::npos) env.emplace(kv.substr(0, eq), kv.substr(eq + 1));
  }
  return env;
}

// Signals the main loop waits for instead of handling asynchronously.
sigset_t loop_signals() {
  sigset_t set;
  sigemptyset(&set);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGCHLD}) sigaddset(&set, sig);
  return set;
}

// Gives back the signal mask `old` once the loop is over. A signal of loop_signals() that came
// during the teardown (a second Ctrl-C while the session is written, the job's SIGCHLD) was
// for the loop: taken here, it cannot end eacgm by its default action after the session is
// written and turn the exit code the caller relies on into a death by signal.
void restore_signal_mask(const sigset_t& old) {
  const sigset_t loop = loop_signals();
  const timespec now{};
  while (sigtimedwait(&loop, nullptr, &now) > 0) {
  }
  sigprocmask(SIG_SETMASK, &old, nullptr);
}

// Everything record and attach share: the session, its sinks and the tracer.
class TraceRun {
 public:
  explicit TraceRun(const TraceOptions& options)
      : options_(options),
        recorder_(session_, options.layers,
                  CollectiveTracker::Options{
                      .hang_timeout_ns = static_cast<uint64_t>(options.hang_timeout_s * 1e9)}) {}

  // Returns an exit code on failure.
  std::optional<int> start() {
    const Privileges privileges = current_privileges();
    if (!privileges.sufficient()) return fail(kExitUsage, privileges.explain());
    auto dir = SessionDir::claim(options_.out_dir);
    if (!dir) return fail(kExitUsage, dir.error().message);
    dir_.emplace(std::move(*dir));

    session_.version = EACGM_VERSION;
    session_.realtime_offset_ns = realtime_offset_ns();
    session_.start_ns = monotonic_ns();
    recorder_.set_output_dir(options_.out_dir);
    OsMonitor::Options os_monitor;
    os_monitor.self_pid = static_cast<uint32_t>(getpid());
    recorder_.configure_os({.ioctl_devices = options_.ioctl_devices, .monitor = os_monitor});

    std::set<Layer> bpf_layers = options_.layers;
    bpf_layers.erase(Layer::kGpu);  // NVML, read from user space: no BPF program
    auto torch_ops = TorchOpFilter::parse(options_.torch_ops);
    if (!torch_ops) return fail(kExitUsage, torch_ops.error().message);
    Tracer::Options topts{.layers = bpf_layers,
                          .stop_on_dlopen = options_.stop_on_dlopen,
                          .btf_path = options_.btf_path,
                          .verbose = options_.verbose,
                          .torch_ops = std::move(*torch_ops),
                          .duty_cycle = options_.overhead_budget_pct.has_value()};
    auto tracer =
        Tracer::open(topts, [this](std::span<const std::byte> d) { recorder_.handle(d); });
    if (!tracer) return fail(kExitUsage, tracer.error().message);
    tracer_ = std::move(*tracer);
    recorder_.set_tracer(tracer_.get());
    if (options_.overhead_budget_pct) {
      if (auto problem = overhead_.prepare_budget()) return fail(kExitUsage, *problem);
      recorder_.set_overhead_budget({.budget = *options_.overhead_budget_pct / 100},
                                    session_.start_ns,
                                    [this] { return overhead_.call_costs_ns(*tracer_); });
    }
    for (const std::string& warning : tracer_->warnings()) {
      fmt::print(stderr, "eacgm: warning: {}\n", warning);
    }
    if (auto problem = tracer_->layer_problem(Layer::kOs);
        problem && options_.layers.contains(Layer::kOs)) {
      fmt::print(stderr, "eacgm: warning: the os layer is unavailable: {}\n", *problem);
    }
    recorder_.refresh_ioctl_devices();
    if (options_.layers.contains(Layer::kPython)) {
      recorder_.configure_python(
          {.rate_hz = options_.python_rate_hz,
           .slow_call_ns = static_cast<uint64_t>(options_.python_slow_ms * 1e6)},
          options_.python_calls);
      tracer_->start_python_sampler(options_.python_rate_hz);
    }

    // The recording starts now: the previous session in the directory goes, whole.
    auto cleared = dir_->clear_previous();
    if (!cleared) return fail(kExitUsage, cleared.error().message);
    if (dir_->had_session()) {
      fmt::print(stderr, "eacgm: replacing the session recorded earlier in {} ({} files removed)\n",
                 options_.out_dir, *cleared);
    }
    reserve_summary(options_.out_dir + "/summary.json");
    auto sqlite = SqliteWriter::open(options_.out_dir + "/events.sqlite");
    if (!sqlite) return fail(kExitUsage, sqlite.error().message);
    auto perfetto = PerfettoWriter::open(options_.out_dir + "/trace.perfetto-trace");
    if (!perfetto) return fail(kExitUsage, perfetto.error().message);
    // Written on a thread of their own: the reader keeps up with the ring buffer.
    std::vector<std::unique_ptr<Sink>> files;
    files.push_back(std::move(*sqlite));
    files.push_back(std::move(*perfetto));
    auto async = std::make_unique<AsyncSinks>(std::move(files));
    files_ = async.get();
    recorder_.add_sink(std::move(async));

    // Before the job starts, so its whole life is sampled. Never fatal.
    if (options_.layers.contains(Layer::kGpu)) {
      GpuLayer::Options gpu;
      gpu.library = options_.nvml_lib;
      gpu.rate_hz = options_.gpu_rate_hz;
      gpu_ = GpuLayer::start(gpu, session_.start_ns);
      recorder_.set_gpu(gpu_.get());
      // No NVML is the normal case on a machine without a GPU; the report
      // says so. Only a library asked for by name deserves a warning.
      if (!gpu_->active() && !options_.nvml_lib.empty()) {
        fmt::print(stderr, "eacgm: warning: the gpu layer is unavailable: {}\n", gpu_->reason());
      }
    }

    if (options_.stop_on_dlopen) {
      if (auto r = tracer_->attach_loader(kLoaderPath); !r) {
        fmt::print(stderr,
                   "eacgm: warning: {}; libraries loaded later at unusual paths may be "
                   "missed\n",
                   r.error().message);
      }
    }
    sigfd_ = signalfd(-1, &signals_, SFD_CLOEXEC | SFD_NONBLOCK);
    return std::nullopt;
  }

  Tracer& tracer() { return *tracer_; }
  Recorder& recorder() { return recorder_; }
  Session& session() { return session_; }

  // Waits for events until `done()` says so or a signal ends the run.
  // `on_signal` sees every signal first and returns true to stop at once.
  template <typename Done, typename OnSignal>
  void loop(Done done, OnSignal on_signal) {
    while (!done()) {
      if (tracer_->wait(sigfd_) < 0) break;
      recorder_.tick(monotonic_ns());
      signalfd_siginfo si{};
      bool stop = false;
      while (read(sigfd_, &si, sizeof(si)) == sizeof(si)) stop |= on_signal(si);
      if (stop) return;
    }
  }

  // Detaches, drains, and writes every output. Returns false if an output failed: then
  // summary.json (if it could be written) and the last message say what is missing.
  bool finish() {
    recorder_.resume_stopped_targets();
    tracer_->drain();
    tracer_->detach_probes();
    recorder_.resume_stopped_targets();
    tracer_->drain();
    session_.end_ns = monotonic_ns();
    recorder_.tick(session_.end_ns, /*final=*/true);
    session_.events_dropped = tracer_->dropped();
    // After the job's end, not beside it: the trap cost may be measured now (once a boot).
    session_.overhead = overhead_.read(*tracer_);
    session_.overhead.pauses = recorder_.pauses();
    session_.overhead.duty_cycle = recorder_.duty_cycle_figures(session_.end_ns);
    if (options_.layers.contains(Layer::kTorch)) {
      session_.layers[Layer::kTorch].extra["calls_unwound"] = tracer_->calls_unwound();
    }
    for (Layer layer : options_.layers) {
      LayerState& state = session_.layers[layer];
      // The gpu layer's status comes from GpuLayer::finish, called by finish_sinks().
      if (layer == Layer::kGpu) continue;
      if (layer == Layer::kPython) {  // interpreters, not a library of a known name
        if (const std::optional<std::string> problem = tracer_->layer_problem(layer)) {
          // Its programs did not load when the first interpreter was found.
          state.status = LayerStatus::kUnavailable;
          state.reason = *problem;
        } else if (recorder_.layer_mapped(layer)) {
          state.status = LayerStatus::kActive;  // its interpreters: set by finish_sinks()
        } else {
          state.status = LayerStatus::kUnavailable;
          state.reason = "no traced process runs a CPython interpreter (3.8 to 3.13)";
        }
        continue;
      }
      if (layer == Layer::kOs) {  // tracepoints: no library to find
        const std::optional<std::string> problem = tracer_->layer_problem(layer);
        state.status = problem ? LayerStatus::kUnavailable : LayerStatus::kActive;
        state.reason = problem.value_or("");
        continue;
      }
      state.libraries.clear();
      for (const TracedLibrary& lib : tracer_->libraries()) {
        if (lib.layer == layer) state.libraries.push_back(lib.path);
      }
      std::string_view prefix = layer_name(layer);
      for (const LayerLibrary& lib : layer_libraries()) {
        if (lib.layer == layer) {
          prefix = lib.file_prefix;
          break;
        }
      }
      // Probes on a library of the search path prove nothing: the job may never load it.
      state.loaded_by_job = recorder_.layer_mapped(layer) || !state.calls.empty();
      if (const std::optional<std::string> problem = tracer_->layer_problem(layer)) {
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
      } else if (layer == Layer::kTorch && !state.loaded_by_job) {
        // PyTorch installed on the machine is common; the job using it is what counts.
        state.status = LayerStatus::kUnavailable;
        state.reason =
            fmt::format("no traced process loaded {} (the job does not use PyTorch)", prefix);
        state.libraries.clear();
      } else {
        state.status = LayerStatus::kActive;
      }
    }
    bool ok = true;
    for (const std::string& error : recorder_.finish_sinks()) {
      fmt::print(stderr, "eacgm: error: {}\n", error);
      ok = false;
    }
    // The file sinks' losses first; the recorder added any flight recorder it could not write.
    const std::vector<OutputLoss> sink_losses = files_->losses();
    session_.lost.insert(session_.lost.begin(), sink_losses.begin(), sink_losses.end());
    ok = ok && session_.lost.empty();
    const std::string summary_path = options_.out_dir + "/summary.json";
    bool summary_written = true;
    if (auto r = write_summary(session_, summary_path); !r) {
      fmt::print(stderr, "eacgm: error: {}\n", r.error().message);
      ok = summary_written = false;
    }
    if (!options_.quiet) fmt::print("{}", text_report(session_));
    if (ok) {
      fmt::print(stderr, "eacgm: session written to {}\n", options_.out_dir);
      return true;
    }
    // The last word, where a script's log shows it: what is missing, and the likely cause.
    std::string missing;
    for (const OutputLoss& loss : session_.lost) {
      missing += fmt::format("; {}: {}", loss.output, describe_loss(loss));
    }
    if (!summary_written) missing += "; summary.json could not be written";
    fmt::print(stderr,
               "eacgm: error: the session in {} is incomplete: a write failed (is the disk "
               "full?){}\n",
               options_.out_dir, missing);
    return false;
  }

  ~TraceRun() {
    if (sigfd_ >= 0) close(sigfd_);
  }

 private:
  TraceOptions options_;
  Session session_;
  Recorder recorder_;
  std::unique_ptr<Tracer> tracer_;
  std::unique_ptr<GpuLayer> gpu_;  // null when the gpu layer is not selected
  std::optional<SessionDir> dir_;  // locked from start() to the end of the run
  AsyncSinks* files_ = nullptr;    // the file sinks (owned by the recorder)
  OverheadMeter overhead_;
  sigset_t signals_ = loop_signals();
  int sigfd_ = -1;
};

int exit_code_of(int status) {
  return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
}

// All descendants of `root` (and root), from /proc/*/stat parent links.
std::vector<uint32_t> process_tree(uint32_t root) {
  std::multimap<uint32_t, uint32_t> children;
  if (DIR* proc = opendir("/proc")) {
    while (dirent* d = readdir(proc)) {
      const uint32_t pid = static_cast<uint32_t>(strtoul(d->d_name, nullptr, 10));
      if (pid == 0) continue;
      std::ifstream stat(fmt::format("/proc/{}/stat", pid));
      std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
      // The command is in parentheses and may contain anything: parse after the last ')'.
      const size_t close = text.rfind(')');
      if (close == std::string::npos) continue;
      char state = 0;
      unsigned ppid = 0;
      if (sscanf(text.c_str() + close + 1, " %c %u", &state, &ppid) == 2)
        children.emplace(ppid, pid);
    }
    closedir(proc);
  }
  std::vector<uint32_t> tree = {root};
  for (size_t i = 0; i < tree.size(); ++i) {
    auto [begin, end] = children.equal_range(tree[i]);
    for (auto it = begin; it != end; ++it) tree.push_back(it->second);
  }
  return tree;
}

}  // namespace

int run_record(const TraceOptions& options, const std::vector<std::string>& command) {
  if (command.empty())
    return fail(kExitUsage, "no command to record; usage: eacgm record -o DIR -- CMD ARGS...");

  // Block the signals the loop reads from a signalfd; the job gets the
  // original mask back before exec.
  sigset_t old_mask;
  sigset_t wanted = loop_signals();
  sigprocmask(SIG_BLOCK, &wanted, &old_mask);

  TraceRun run(options);
  if (auto code = run.start()) return *code;
  run.session().command = command;

  // The child waits on `go` until every probe is in place, then execs.
  int go[2], exec_error[2];
  if (pipe2(go, O_CLOEXEC) != 0 || pipe2(exec_error, O_CLOEXEC) != 0) {
    return fail(kExitUsage, fmt::format("pipe: {}", std::strerror(errno)));
  }
  const pid_t child = fork();
  if (child < 0) return fail(kExitUsage, fmt::format("fork: {}", std::strerror(errno)));
  if (child == 0) {
    close(go[1]);
    close(exec_error[0]);
    char byte;
    if (read(go[0], &byte, 1) != 1) {
      // eacgm died before its probes were ready (it kills the job itself on its own errors):
      // the job must not pay for that, so it runs, untraced.
      static constexpr char kUntraced[] =
          "eacgm: the agent ended before tracing began; the job runs untraced\n";
      (void)!write(STDERR_FILENO, kUntraced, sizeof(kUntraced) - 1);
    }
    sigprocmask(SIG_SETMASK, &old_mask, nullptr);
    std::vector<char*> argv;
    for (const std::string& arg : command) argv.push_back(const_cast<char*>(arg.c_str()));
    argv.push_back(nullptr);
    execvp(argv[0], argv.data());
    const int err = errno;
    (void)!write(exec_error[1], &err, sizeof(err));
    _exit(127);
  }
  close(go[0]);
  close(exec_error[1]);

  if (auto r = run.tracer().add_target(static_cast<uint32_t>(child)); !r) {
    kill(child, SIGKILL);
    return fail(kExitUsage, r.error().message);
  }
  run.recorder().watch_process(static_cast<uint32_t>(child), monotonic_ns());
  // Without the loader stop a library the job dlopens runs before eacgm could probe it, so the
  // libraries it could load are probed ahead. With it, each is probed as it is mapped, before
  // any of its code runs (constructors included): a job pays only for the layers it uses.
  if (!options.stop_on_dlopen) {
    run.recorder().attach_search_path_libraries(own_environment());
  }
  (void)!write(go[1], "g", 1);
  close(go[1]);

  int exec_errno = 0;
  if (read(exec_error[0], &exec_errno, sizeof(exec_errno)) == sizeof(exec_errno)) {
    close(exec_error[0]);
    waitpid(child, nullptr, 0);
    fmt::print(stderr, "eacgm: error: cannot run '{}': {}\n", command[0],
               std::strerror(exec_errno));
    run.finish();
    return 127;
  }
  close(exec_error[0]);

  std::optional<int> status;
  int interrupts = 0;
  bool forced = false;
  run.loop([&] { return status.has_value(); },
           [&](const signalfd_siginfo& si) {
             const int sig = static_cast<int>(si.ssi_signo);
             if (sig == SIGCHLD) {
               int st = 0;
               if (waitpid(child, &st, WNOHANG) == child) status = st;
               return false;
             }
             run.session().interrupted = true;
             if (sig == SIGINT && ++interrupts >= 2) {
               fmt::print(stderr, "\neacgm: second interrupt: stopping now\n");
               forced = true;
               return true;
             }
             // A Ctrl-C at the terminal reached the job's process group already
             // (si_code SI_KERNEL); a kill(1) reached only us: pass it on to
             // every process of the job, so no rank is left behind.
             if (si.ssi_code != SI_KERNEL) {
               for (const auto& [pid, proc] : run.session().processes) {
                 if (!proc.exit) kill(static_cast<pid_t>(pid), sig);
               }
             }
             fmt::print(stderr,
                        "\neacgm: {} forwarded to the job; waiting for it to exit "
                        "(interrupt again to stop now)\n",
                        strsignal(sig));
             return false;
           });
  if (status) run.session().exit_code = exit_code_of(*status);
  const bool written = run.finish();
  restore_signal_mask(old_mask);
  if (!status) return 130;
  // The job's exit code is the contract: scripts wrap jobs in `eacgm record`. When the job
  // succeeded but its session lost output, a 0 would hide the loss: kExitOutputLost instead.
  const int job = exit_code_of(*status);
  return job == 0 && !written ? kExitOutputLost : job;
}

int run_attach(const TraceOptions& options, int pid, std::optional<double> duration_s) {
  if (pid <= 0 || (kill(pid, 0) != 0 && errno == ESRCH)) {
    return fail(kExitUsage, fmt::format("no process with pid {}", pid));
  }
  sigset_t old_mask;
  sigset_t wanted = loop_signals();
  sigprocmask(SIG_BLOCK, &wanted, &old_mask);

  TraceRun run(options);
  if (auto code = run.start()) return *code;
  const uint64_t start = monotonic_ns();
  for (uint32_t p : process_tree(static_cast<uint32_t>(pid))) {
    if (auto r = run.tracer().add_target(p); !r) return fail(kExitUsage, r.error().message);
    run.session().attached_pids.push_back(p);
    run.recorder().watch_process(p, 0);
  }
  fmt::print(stderr, "eacgm: attached to pid {} ({} processes){}\n", pid,
             run.session().attached_pids.size(),
             duration_s ? fmt::format(" for {} s", *duration_s) : "; Ctrl-C to stop");
  const uint64_t deadline = duration_s ? start + static_cast<uint64_t>(*duration_s * 1e9) : 0;
  run.loop(
      [&] {
        if (deadline && monotonic_ns() >= deadline) return true;
        return run.recorder().live_processes() == 0;
      },
      [&](const signalfd_siginfo& si) {
        if (si.ssi_signo == SIGCHLD) return false;
        run.session().interrupted = true;
        return true;  // attach never signals the target: stop tracing, leave it running
      });
  const bool ok = run.finish();
  restore_signal_mask(old_mask);
  return ok ? kExitOk : kExitOutputLost;
}

}  // namespace eacgm
