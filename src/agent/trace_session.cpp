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

#include "agent/agent_runtime.h"
#include "agent/session_dir.h"
#include "common/clock.h"
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

// The signals record's and attach's loop reads: an interrupt, the job's end.
LoopSignals record_signals() { return LoopSignals{SIGINT, SIGTERM, SIGHUP, SIGCHLD}; }

// record and attach keep everything for summary.json, and the flight recorders in the session.
AgentMode record_mode(const TraceOptions& options) {
  AgentMode mode;
  mode.output_dir = options.out_dir;
  return mode;
}

// Record's and attach's session: the agent runtime writing a session directory.
class TraceRun {
 public:
  explicit TraceRun(const TraceOptions& options)
      : options_(options), runtime_(options.agent, record_mode(options)) {}

  // Returns an exit code on failure.
  std::optional<int> start() {
    if (auto code = runtime_.open()) return code;
    auto dir = SessionDir::claim(options_.out_dir);
    if (!dir) return fail(kExitUsage, dir.error().message);
    dir_.emplace(std::move(*dir));

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
    runtime_.add_sink(std::move(async));
    // Before the job starts, so its whole life is sampled.
    runtime_.begin();
    return std::nullopt;
  }

  AgentRuntime& runtime() { return runtime_; }
  Tracer& tracer() { return runtime_.tracer(); }
  Recorder& recorder() { return runtime_.recorder(); }
  Session& session() { return runtime_.session(); }

  // Detaches, drains, and writes every output. Returns false if an output failed: then
  // summary.json (if it could be written) and the last message say what is missing.
  bool finish() {
    runtime_.stop();
    Session& session = runtime_.session();
    session.end_ns = monotonic_ns();
    runtime_.recorder().tick(session.end_ns, /*final=*/true);
    session.events_dropped = runtime_.tracer().dropped();
    // After the job's end, not beside it: the trap cost may be measured now (once a boot).
    session.overhead = runtime_.overhead(session.end_ns);
    runtime_.settle_layer_statuses();
    bool ok = true;
    for (const std::string& error : runtime_.recorder().finish_sinks()) {
      fmt::print(stderr, "eacgm: error: {}\n", error);
      ok = false;
    }
    // The file sinks' losses first; the recorder added any flight recorder it could not write.
    const std::vector<OutputLoss> sink_losses = files_->losses();
    session.lost.insert(session.lost.begin(), sink_losses.begin(), sink_losses.end());
    ok = ok && session.lost.empty();
    const std::string summary_path = options_.out_dir + "/summary.json";
    bool summary_written = true;
    if (auto r = write_summary(session, summary_path); !r) {
      fmt::print(stderr, "eacgm: error: {}\n", r.error().message);
      ok = summary_written = false;
    }
    if (!options_.quiet) fmt::print("{}", text_report(session));
    if (ok) {
      fmt::print(stderr, "eacgm: session written to {}\n", options_.out_dir);
      return true;
    }
    // The last word, where a script's log shows it: what is missing, and the likely cause.
    std::string missing;
    for (const OutputLoss& loss : session.lost) {
      missing += fmt::format("; {}: {}", loss.output, describe_loss(loss));
    }
    if (!summary_written) missing += "; summary.json could not be written";
    fmt::print(stderr,
               "eacgm: error: the session in {} is incomplete: a write failed (is the disk "
               "full?){}\n",
               options_.out_dir, missing);
    return false;
  }

 private:
  TraceOptions options_;
  AgentRuntime runtime_;
  std::optional<SessionDir> dir_;  // locked from start() to the end of the run
  AsyncSinks* files_ = nullptr;    // the file sinks (owned by the recorder)
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

  // Read from a signalfd by the loop; the job gets the original mask back before exec.
  const LoopSignals signals = record_signals();
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
    sigprocmask(SIG_SETMASK, &signals.previous_mask(), nullptr);
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
  if (!options.agent.stop_on_dlopen) {
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
  run.runtime().loop(
      signals, [&] { return status.has_value(); },
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
      },
      [](uint64_t) {});
  if (status) run.session().exit_code = exit_code_of(*status);
  const bool written = run.finish();
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
  const LoopSignals signals = record_signals();
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
  run.runtime().loop(
      signals,
      [&] {
        if (deadline && monotonic_ns() >= deadline) return true;
        return run.recorder().live_processes() == 0;
      },
      [&](const signalfd_siginfo& si) {
        if (si.ssi_signo == SIGCHLD) return false;
        run.session().interrupted = true;
        return true;  // attach never signals the target: stop tracing, leave it running
      },
      [](uint64_t) {});
  const bool ok = run.finish();
  return ok ? kExitOk : kExitOutputLost;
}

}  // namespace eacgm
