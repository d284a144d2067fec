#include "agent/recorder.h"

#include <fmt/format.h>
#include <signal.h>
#include <sys/wait.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

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

void Recorder::warn(std::string message) {
  fmt::print(stderr, "eacgm: warning: {}\n", message);
  warnings_.push_back(std::move(message));
}

void Recorder::handle(std::span<const std::byte> data) {
  auto event = decode_event(data);
  if (!event) {
    if (decode_errors_++ == 0) warn(event.error().message);
    return;
  }
  if (auto* call = std::get_if<CallRecord>(&*event)) {
    on_call(*call);
  } else {
    on_process_event(std::get<ProcEvent>(*event));
  }
}

void Recorder::on_call(const CallRecord& event) {
  ProcessInfo& proc = session_.process(event.pid);
  if (!event.finished) {
    collectives_.on_begin(event, &proc);
    return;
  }
  CallRecord call = event;
  if (call.layer() == Layer::kNccl) {
    call.collective = collectives_.on_end(call, &proc);
    if (call.spec->role == CallRole::kCommInit && !call.failed() && !proc.rank) {
      proc.rank = static_cast<int32_t>(call.raw.args[call.spec->rank_slot]);
    }
  }
  ++session_.events_recorded;
  session_.add_call(call);
  if (!call.failed() && (call.spec->memory == MemoryEffect::kDeviceAlloc ||
                         call.spec->memory == MemoryEffect::kDeviceFree)) {
    leaks_.on_memory(call.pid, call.start_ns + call.duration_ns,
                     session_.device_memory[call.pid].outstanding_bytes);
  }
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
  attach_mapped_libraries(pid);
}

void Recorder::attach_mapped_libraries(uint32_t pid) {
  if (!tracer_) return;
  auto files = mapped_files(pid);
  if (!files) return;  // it exited meanwhile; its exit event tells the rest
  for (const MappedFile& file : *files) {
    if (!file.executable) continue;
    const std::optional<Layer> layer = library_layer(file.path);
    if (!layer || !layers_.contains(*layer)) continue;
    // Through /proc/PID/root so a target in another mount namespace works too.
    const std::string path = fmt::format("/proc/{}/root{}", pid, file.path);
    auto attached = tracer_->attach_library(*layer, path);
    if (!attached) warn(attached.error().message);
  }
}

void Recorder::attach_search_path_libraries(const std::map<std::string, std::string>& env) {
  if (!tracer_) return;
  const std::vector<std::string> dirs = library_search_dirs(env);
  for (const LayerLibrary& lib : layer_libraries()) {
    if (!layers_.contains(lib.layer)) continue;
    for (const std::string& path : find_library_files(lib.file_prefix, dirs)) {
      auto attached = tracer_->attach_library(lib.layer, path);
      if (!attached) warn(attached.error().message);
    }
  }
}

void Recorder::on_process_event(const ProcEvent& event) {
  switch (event.kind) {
    case ProcEvent::Kind::kFork: {
      ProcessInfo& child = session_.process(event.pid);
      child.ppid = event.ppid;
      child.start_ns = event.ts_ns;
      child.comm = event.comm;
      if (const ProcessInfo* parent = session_.find_process(event.ppid)) {
        child.cmdline = parent->cmdline;
        child.rank = parent->rank;
        child.world_size = parent->world_size;
      }
      break;
    }
    case ProcEvent::Kind::kExec:
      session_.process(event.pid).rank.reset();
      session_.process(event.pid).world_size.reset();
      refresh_identity(event.pid);
      break;
    case ProcEvent::Kind::kExit: {
      ProcessInfo& proc = session_.process(event.pid);
      if (proc.comm.empty()) proc.comm = event.comm;
      proc.end_ns = event.ts_ns;
      proc.exit = describe_exit_status(event.status);
      stopped_.erase(event.pid);
      break;
    }
    case ProcEvent::Kind::kLoaderStop:
      // The target is stopped right after ld.so mapped new objects: probe
      // them before their first instruction runs, then let it go.
      stopped_.insert(event.pid);
      attach_mapped_libraries(event.pid);
      if (kill(static_cast<pid_t>(event.pid), SIGCONT) == 0 || errno == ESRCH) {
        stopped_.erase(event.pid);
      }
      break;
  }
}

void Recorder::resume_stopped_targets() {
  for (uint32_t pid : stopped_) kill(static_cast<pid_t>(pid), SIGCONT);
  stopped_.clear();
}

size_t Recorder::live_processes() const {
  size_t n = 0;
  for (const auto& [pid, proc] : session_.processes) {
    if (!proc.exit && kill(static_cast<pid_t>(pid), 0) == 0) ++n;
  }
  return n;
}

void Recorder::report(Anomaly anomaly) {
  fmt::print(stderr, "eacgm: anomaly [{}] {}\n", anomaly.kind, anomaly.message);
  session_.anomalies.push_back(std::move(anomaly));
}

void Recorder::tick(uint64_t now_ns, bool final) {
  // Trends need time to show: the leak check runs once a second and at the end.
  if (final || now_ns >= leaks_checked_ns_ + 1'000'000'000) {
    leaks_checked_ns_ = now_ns;
    for (Anomaly& a : leaks_.check(session_.start_ns)) report(std::move(a));
  }
  if (!layers_.contains(Layer::kNccl)) return;
  collectives_.set_session_start(session_.start_ns);
  for (Anomaly& a : collectives_.check(now_ns)) report(std::move(a));
}

std::vector<std::string> Recorder::finish_sinks() {
  if (layers_.contains(Layer::kNccl)) {
    session_.layers[Layer::kNccl].extra["ranks"] = collectives_.rank_figures();
  }
  std::vector<std::string> errors;
  for (auto& sink : sinks_) {
    if (auto r = sink->finish(session_); !r) errors.push_back(r.error().message);
  }
  return errors;
}

}  // namespace eacgm
