#include "agent/serve_session.h"

#include <fmt/format.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <memory>

#include "agent/agent_runtime.h"
#include "common/clock.h"
#include "common/exit_codes.h"
#include "serve/discovery.h"
#include "serve/http_server.h"
#include "serve/serve_metrics.h"

namespace eacgm {
namespace {

// Processes that mapped no traced library are looked at again this often
// (PyTorch loads CUDA lazily); new pids at every scan.
constexpr uint64_t kRecheckNs = 2'000'000'000;
// An exited process's series stay this long, so a last scrape can see them.
constexpr uint64_t kKeepExitedNs = 2'000'000'000;
// Stragglers are judged on each rank's last this many collectives: what the
// rank does now (minutes of a training job), in 33 KiB per rank however long
// the job has run.
constexpr size_t kStragglerWindow = 4096;
// serve writes no session record, so the os layer's lists (kept for
// summary.json by `record`) are short; the dead's entries are released.
constexpr size_t kMaxOsSignals = 256;
constexpr size_t kMaxOsOomKills = 64;
constexpr size_t kMaxOsSlowIoctls = 64;

AgentMode serve_mode() {
  AgentMode mode;
  mode.keep_durations = false;  // fixed-bucket histograms in ServeMetrics instead
  mode.straggler_window = kStragglerWindow;
  mode.os_monitor.max_signals = kMaxOsSignals;
  mode.os_monitor.max_oom_kills = kMaxOsOomKills;
  mode.os_monitor.max_slow_ioctls = kMaxOsSlowIoctls;
  mode.notice_libraries = true;
  mode.trap_cost_at_start = true;
  return mode;
}

// serve's targets between scans: which processes it follows and who they are, published as
// metrics.
class ServeTargets {
 public:
  ServeTargets(AgentRuntime& runtime, ServeMetrics& metrics, std::optional<std::string> cgroup)
      : runtime_(runtime),
        session_(runtime.session()),
        recorder_(runtime.recorder()),
        tracer_(runtime.tracer()),
        metrics_(metrics),
        cgroup_(std::move(cgroup)),
        self_(static_cast<uint32_t>(getpid())) {}

  // A process the kernel noticed as it mapped a traced library (Recorder::NoticeHandler): it is
  // followed from now on unless it is outside the cgroup.
  bool adopt(uint32_t pid, uint64_t ts_ns) {
    if (!in_cgroup(pid)) return false;
    if (auto r = tracer_.add_target(pid); !r) {  // tells the guardian
      fmt::print(stderr, "eacgm: warning: cannot trace pid {}: {}\n", pid, r.error().message);
      return false;
    }
    recorder_.watch_process(pid, ts_ns);
    if (runtime_.options().verbose) fmt::print(stderr, "eacgm: tracing pid {} (noticed)\n", pid);
    return true;
  }

  // New processes that map a traced library (in the cgroup, if one was given).
  void scan(uint64_t now_ns) {
    std::map<uint32_t, uint64_t> checked;
    for (uint32_t pid : list_pids()) {
      if (pid == self_ || session_.processes.contains(pid)) continue;
      if (auto it = checked_.find(pid); it != checked_.end() && now_ns < it->second + kRecheckNs) {
        checked.insert(*it);
        continue;
      }
      if (!in_cgroup(pid) || !maps_traced_library(pid, runtime_.options().layers)) {
        checked.emplace(pid, now_ns);
        continue;
      }
      if (auto r = tracer_.add_target(pid); !r) {
        fmt::print(stderr, "eacgm: warning: cannot trace pid {}: {}\n", pid, r.error().message);
        checked.emplace(pid, now_ns);
        continue;
      }
      recorder_.watch_process(pid, 0);
      if (runtime_.options().verbose) fmt::print(stderr, "eacgm: tracing pid {}\n", pid);
    }
    checked_ = std::move(checked);  // pids that are gone are dropped here
  }

  // Identities and memory of the processes followed; the dead are released.
  void sync(uint64_t now_ns) {
    std::vector<uint32_t> gone;
    for (const auto& [pid, proc] : session_.processes) {
      const bool exited =
          proc.exit.has_value() || (kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH);
      if (exited && (proc.end_ns == 0 || now_ns >= proc.end_ns + kKeepExitedNs)) {
        gone.push_back(pid);
        continue;
      }
      auto it = identities_.find(pid);
      // An exec changes the command line and perhaps the rank: read it again; and while the
      // environment could not be read (mid-exec), so that series never start without a job.
      if (it == identities_.end() ||
          (!exited && (it->second.first != proc.cmdline || !it->second.second.environment_read))) {
        it =
            identities_.insert_or_assign(pid, std::pair{proc.cmdline, identify_process(pid)}).first;
      }
      ServedProcess p = it->second.second;
      if (proc.rank) p.rank = proc.rank;  // from the communicator when the environment has none
      if (proc.world_size) p.world_size = proc.world_size;
      if (p.comm.empty()) p.comm = proc.comm;
      if (auto mem = session_.device_memory.find(pid); mem != session_.device_memory.end()) {
        p.device_memory_bytes = mem->second.outstanding_bytes;
      }
      metrics_.update_process(std::move(p));
    }
    for (uint32_t pid : gone) {
      metrics_.forget_process(pid);
      recorder_.forget_process(pid);
      identities_.erase(pid);
    }
    metrics_.set_event_counts(session_.events_recorded, tracer_.dropped());
    metrics_.set_overhead(runtime_.overhead(now_ns));
    // The same rule as record's summary.json: a layer is active once a target's library of it
    // is probed (the os layer: once its tracepoints are attached).
    runtime_.settle_layer_statuses();
    for (Layer layer : runtime_.options().layers) {
      // A layer read from user space (the gpu sampler): set once at start-up.
      if (layer_info(layer).source == LayerSource::kUserSpace) continue;
      metrics_.set_layer_active(layer, session_.layers[layer].status == LayerStatus::kActive);
    }
  }

  // Anomalies the recorder found since the last call.
  void publish_anomalies() {
    if (session_.anomalies.empty()) return;
    const double now_s = static_cast<double>(clock_ns(CLOCK_REALTIME)) / 1e9;
    for (const Anomaly& a : session_.anomalies) metrics_.on_anomaly(a, now_s);
    session_.anomalies.clear();
  }

 private:
  bool in_cgroup(uint32_t pid) const {
    if (!cgroup_) return true;
    const std::optional<std::string> cg = process_cgroup(pid);
    return cg && cgroup_within(*cg, *cgroup_);
  }

  AgentRuntime& runtime_;
  Session& session_;
  Recorder& recorder_;
  Tracer& tracer_;
  ServeMetrics& metrics_;
  std::optional<std::string> cgroup_;
  uint32_t self_;
  std::map<uint32_t, uint64_t> checked_;  // pid -> when it was found to map nothing traced
  std::map<uint32_t, std::pair<std::vector<std::string>, ServedProcess>> identities_;
};

}  // namespace

int run_serve(const ServeOptions& options) {
  auto listen = parse_listen_address(options.listen);
  if (!listen) return fail(kExitUsage, listen.error().message);
  std::optional<std::string> cgroup;
  if (!options.cgroup.empty()) {
    auto resolved = resolve_cgroup(options.cgroup);
    if (!resolved) return fail(kExitUsage, resolved.error().message);
    cgroup = *resolved;
  }

  // Before any thread exists (HTTP, NVML sampler), so the signals reach only the signalfd.
  const LoopSignals signals{SIGINT, SIGTERM, SIGHUP};
  AgentMode mode = serve_mode();
  // A job outside the cgroup is not even stopped to be looked at.
  if (cgroup) mode.notice_cgroup_dir = cgroup_directory(*cgroup).value_or("");
  AgentRuntime runtime(options.agent, mode);
  if (auto code = runtime.open()) return *code;
  auto owned_metrics = std::make_unique<ServeMetrics>(ServeMetrics::Options{}, EACGM_VERSION);
  ServeMetrics& metrics = *owned_metrics;
  runtime.add_sink(std::move(owned_metrics));  // the runtime outlives the HTTP server below

  const uint64_t started_s = clock_ns(CLOCK_REALTIME) / 1'000'000'000;
  HttpServer::Handlers handlers{
      .metrics = [&metrics] { return metrics.render(); },
      .anomalies = [&metrics] { return metrics.anomalies_json(); },
      .health =
          [&metrics, started_s] {
            return fmt::format("{{\"status\": \"ok\", \"processes\": {}, \"started\": {}}}\n",
                               metrics.processes(), started_s);
          }};
  auto http = HttpServer::start(*listen, handlers);
  if (!http) return fail(kExitUsage, http.error().message);

  runtime.begin();
  for (Layer layer : options.agent.layers) {
    // A layer read from user space (the gpu sampler) is active from its start or never.
    if (layer_info(layer).source != LayerSource::kUserSpace) continue;
    metrics.set_layer_active(layer, !runtime.recorder().layer_unavailable(layer));
  }
  ServeTargets targets(runtime, metrics, cgroup);
  runtime.recorder().set_notice_handler(
      [&targets](uint32_t pid, uint64_t ts_ns) { return targets.adopt(pid, ts_ns); });
  const uint64_t scan_ns = static_cast<uint64_t>(options.scan_interval_s * 1e9);
  uint64_t next_scan = 0;
  fmt::print(stderr, "eacgm: serving http://{}:{}/metrics{}\n",
             listen->host.find(':') == std::string::npos ? listen->host : "[" + listen->host + "]",
             (*http)->port(), cgroup ? fmt::format(" (processes in cgroup {})", *cgroup) : "");
  runtime.loop(
      signals, [] { return false; },
      [](const signalfd_siginfo& si) {
        fmt::print(stderr, "eacgm: {}: removing probes and stopping\n",
                   strsignal(static_cast<int>(si.ssi_signo)));
        return true;
      },
      [&](uint64_t now_ns) {
        targets.publish_anomalies();
        if (now_ns >= next_scan) {
          targets.scan(now_ns);
          targets.sync(now_ns);
          next_scan = now_ns + scan_ns;
        }
      });

  // Nothing may stay stopped or probed once we stop listening.
  runtime.stop();
  runtime.recorder().set_notice_handler({});  // `targets` goes first
  return 0;
}

}  // namespace eacgm
