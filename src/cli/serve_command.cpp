#include "cli/serve_command.h"

#include <fmt/format.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <time.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <map>
#include <memory>

#include "agent/overhead_meter.h"
#include "agent/privileges.h"
#include "agent/recorder.h"
#include "agent/trace_session.h"
#include "cli/numeric_flags.h"
#include "common/clock.h"
#include "gpu/gpu_layer.h"
#include "probes/tracer.h"
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

// The file-name prefixes of the enabled layers' libraries: a process that maps one is noticed
// (Tracer::Options::notice_libraries) and traced from its first call.
std::vector<std::string> library_prefixes(const std::set<Layer>& layers) {
  std::vector<std::string> out;
  for (const LayerLibrary& lib : layer_libraries()) {
    if (layers.contains(lib.layer)) out.emplace_back(lib.file_prefix);
  }
  return out;
}

// The agent's state between scans: which processes it follows, who they are.
class Agent {
 public:
  Agent(const ServeOptions& options, Session& session, Recorder& recorder, Tracer& tracer,
        ServeMetrics& metrics, std::optional<std::string> cgroup)
      : options_(options),
        session_(session),
        recorder_(recorder),
        tracer_(tracer),
        metrics_(metrics),
        cgroup_(std::move(cgroup)),
        self_(static_cast<uint32_t>(getpid())) {
    bpf_layers_ = options.layers;
    bpf_layers_.erase(Layer::kGpu);
    bpf_layers_.erase(Layer::kOs);  // tracepoints: no library to look for
    overhead_.measure_trap_cost();  // at start-up, once a boot: ~0.1 s, then cached
  }

  // A process the kernel noticed as it mapped a traced library (Recorder::NoticeHandler): it is
  // followed from now on unless it is outside the cgroup.
  bool adopt(uint32_t pid, uint64_t ts_ns) {
    if (cgroup_) {
      const std::optional<std::string> cg = process_cgroup(pid);
      if (!cg || !cgroup_within(*cg, *cgroup_)) return false;
    }
    if (auto r = tracer_.add_target(pid); !r) {  // tells the guardian
      fmt::print(stderr, "eacgm: warning: cannot trace pid {}: {}\n", pid, r.error().message);
      return false;
    }
    recorder_.watch_process(pid, ts_ns);
    if (options_.verbose) fmt::print(stderr, "eacgm: tracing pid {} (noticed)\n", pid);
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
      if (cgroup_) {
        const std::optional<std::string> cg = process_cgroup(pid);
        if (!cg || !cgroup_within(*cg, *cgroup_)) {
          checked.emplace(pid, now_ns);
          continue;
        }
      }
      if (!maps_traced_library(pid, bpf_layers_)) {
        checked.emplace(pid, now_ns);
        continue;
      }
      if (auto r = tracer_.add_target(pid); !r) {
        fmt::print(stderr, "eacgm: warning: cannot trace pid {}: {}\n", pid, r.error().message);
        checked.emplace(pid, now_ns);
        continue;
      }
      recorder_.watch_process(pid, 0);
      if (options_.verbose) fmt::print(stderr, "eacgm: tracing pid {}\n", pid);
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
    TracingOverhead overhead = overhead_.read(tracer_);
    overhead.pauses = recorder_.pauses();
    overhead.duty_cycle = recorder_.duty_cycle_figures(now_ns);
    metrics_.set_overhead(std::move(overhead));
    for (Layer layer : options_.layers) {
      if (layer == Layer::kGpu) continue;  // set by the caller, which owns the gpu layer
      bool active = !tracer_.layer_problem(layer).has_value();
      if (layer != Layer::kOs) {
        active = false;
        for (const TracedLibrary& lib : tracer_.libraries()) active |= lib.layer == layer;
      }
      metrics_.set_layer_active(layer, active);
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
  const ServeOptions& options_;
  Session& session_;
  Recorder& recorder_;
  Tracer& tracer_;
  ServeMetrics& metrics_;
  std::optional<std::string> cgroup_;
  uint32_t self_;
  std::set<Layer> bpf_layers_;
  std::map<uint32_t, uint64_t> checked_;  // pid -> when it was found to map nothing traced
  std::map<uint32_t, std::pair<std::vector<std::string>, ServedProcess>> identities_;
  OverheadMeter overhead_;
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
  const Privileges privileges = current_privileges();
  if (!privileges.sufficient()) return fail(kExitUsage, privileges.explain());
  OverheadMeter budget_costs;  // --overhead-budget: what a traced call costs, from the first
  if (options.overhead_budget_pct) {
    if (auto problem = budget_costs.prepare_budget()) return fail(kExitUsage, *problem);
  }

  // Before any thread exists (HTTP, NVML sampler), so the signals reach only the signalfd.
  sigset_t signals;
  sigemptyset(&signals);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&signals, sig);
  sigset_t old_mask;
  sigprocmask(SIG_BLOCK, &signals, &old_mask);
  const int sigfd = signalfd(-1, &signals, SFD_CLOEXEC | SFD_NONBLOCK);

  Session session;
  session.keep_durations = false;  // fixed-bucket histograms in ServeMetrics instead
  session.version = EACGM_VERSION;
  session.start_ns = clock_ns(CLOCK_MONOTONIC);
  session.realtime_offset_ns = realtime_offset_ns();
  Recorder recorder(session, options.layers,
                    CollectiveTracker::Options{
                        .hang_timeout_ns = static_cast<uint64_t>(options.hang_timeout_s * 1e9),
                        .straggler_window = kStragglerWindow});
  auto owned_metrics = std::make_unique<ServeMetrics>(ServeMetrics::Options{}, EACGM_VERSION);
  ServeMetrics& metrics = *owned_metrics;
  recorder.add_sink(std::move(owned_metrics));  // the recorder outlives the HTTP server below

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
  if (!http) {
    sigprocmask(SIG_SETMASK, &old_mask, nullptr);
    return fail(kExitUsage, http.error().message);
  }

  OsMonitor::Options os_monitor;
  os_monitor.self_pid = static_cast<uint32_t>(getpid());
  os_monitor.max_signals = kMaxOsSignals;
  os_monitor.max_oom_kills = kMaxOsOomKills;
  os_monitor.max_slow_ioctls = kMaxOsSlowIoctls;
  recorder.configure_os({.monitor = os_monitor});
  std::set<Layer> bpf_layers = options.layers;
  bpf_layers.erase(Layer::kGpu);
  auto torch_ops = TorchOpFilter::parse(options.torch_ops);
  if (!torch_ops) {
    sigprocmask(SIG_SETMASK, &old_mask, nullptr);
    return fail(kExitUsage, torch_ops.error().message);
  }
  auto tracer = Tracer::open({.layers = bpf_layers,
                              .stop_on_dlopen = true,
                              .btf_path = options.btf_path,
                              .verbose = options.verbose,
                              .torch_ops = std::move(*torch_ops),
                              .duty_cycle = options.overhead_budget_pct.has_value(),
                              .notice_libraries = library_prefixes(bpf_layers)},
                             [&recorder](std::span<const std::byte> d) { recorder.handle(d); });
  if (!tracer) {
    sigprocmask(SIG_SETMASK, &old_mask, nullptr);
    return fail(kExitUsage, tracer.error().message);
  }
  recorder.set_tracer(tracer->get());
  if (options.overhead_budget_pct) {
    recorder.set_overhead_budget(
        {.budget = *options.overhead_budget_pct / 100}, session.start_ns,
        [&budget_costs, &tracer] { return budget_costs.call_costs_ns(**tracer); });
  }
  for (const std::string& warning : (*tracer)->warnings()) {
    fmt::print(stderr, "eacgm: warning: {}\n", warning);
  }
  recorder.refresh_ioctl_devices();
  // A library a followed process dlopen()s later is probed before its first call.
  if (auto r = (*tracer)->attach_loader(kLoaderPath); !r) {
    fmt::print(stderr, "eacgm: warning: {}; libraries loaded later may be missed\n",
               r.error().message);
  }
  std::unique_ptr<GpuLayer> gpu;
  if (options.layers.contains(Layer::kGpu)) {
    GpuLayer::Options gpu_options;
    gpu_options.library = options.nvml_lib;
    gpu_options.rate_hz = options.gpu_rate_hz;
    gpu = GpuLayer::start(gpu_options, session.start_ns);
    recorder.set_gpu(gpu.get());
    metrics.set_layer_active(Layer::kGpu, gpu->active());
    if (!gpu->active() && !options.nvml_lib.empty()) {
      fmt::print(stderr, "eacgm: warning: the gpu layer is unavailable: {}\n", gpu->reason());
    }
  }

  Agent agent(options, session, recorder, **tracer, metrics, cgroup);
  recorder.set_notice_handler(
      [&agent](uint32_t pid, uint64_t ts_ns) { return agent.adopt(pid, ts_ns); });
  const uint64_t scan_ns = static_cast<uint64_t>(options.scan_interval_s * 1e9);
  uint64_t next_scan = 0;
  fmt::print(stderr, "eacgm: serving http://{}:{}/metrics{}\n",
             listen->host.find(':') == std::string::npos ? listen->host : "[" + listen->host + "]",
             (*http)->port(), cgroup ? fmt::format(" (processes in cgroup {})", *cgroup) : "");
  for (bool stop = false; !stop;) {
    if ((*tracer)->wait(sigfd) < 0) break;
    const uint64_t now = clock_ns(CLOCK_MONOTONIC);
    recorder.tick(now);
    agent.publish_anomalies();
    if (now >= next_scan) {
      agent.scan(now);
      agent.sync(now);
      next_scan = now + scan_ns;
    }
    signalfd_siginfo si{};
    while (read(sigfd, &si, sizeof(si)) == sizeof(si)) {
      stop = true;
      fmt::print(stderr, "eacgm: {}: removing probes and stopping\n",
                 strsignal(static_cast<int>(si.ssi_signo)));
    }
  }

  // Nothing may stay stopped or probed once we stop listening.
  recorder.resume_stopped_targets();
  (*tracer)->drain();
  (*tracer)->detach_probes();
  recorder.resume_stopped_targets();
  http->reset();
  tracer->reset();
  close(sigfd);
  sigprocmask(SIG_SETMASK, &old_mask, nullptr);
  return 0;
}

void add_serve_command(CLI::App& app, std::function<int()>& run, LayerParser parse_layers) {
  struct Args {
    ServeOptions options;
    std::string layers;
  };
  auto args = std::make_shared<Args>();
  CLI::App* serve = app.add_subcommand(
      "serve", "trace every process that uses a traced library; serve Prometheus /metrics");
  serve
      ->add_option("--listen", args->options.listen,
                   "HOST:PORT to serve /metrics, /healthz and /anomalies on")
      ->capture_default_str();
  serve->add_option("--layers", args->layers, "comma-separated layers to trace")
      ->default_val("cuda,driver,nccl,os,gpu");
  serve->add_option("--cgroup", args->options.cgroup,
                    "trace only processes in this cgroup v2 (a directory of the hierarchy or a "
                    "path below its root)");
  serve
      ->add_option("--hang-timeout", args->options.hang_timeout_s,
                   "seconds a collective may wait for missing ranks before it is a hang")
      ->capture_default_str()
      ->check(bounded(kMinHangTimeoutS, kMaxHangTimeoutS, "seconds (at most a day)"));
  serve
      ->add_option("--scan-interval", args->options.scan_interval_s,
                   "seconds between searches of /proc for new processes")
      ->capture_default_str()
      ->check(bounded(0.05, 60, "seconds"));
  serve->add_option("--nvml-lib", args->options.nvml_lib,
                    "gpu layer: NVML library to load (default: libnvidia-ml.so.1)");
  serve
      ->add_option("--gpu-rate", args->options.gpu_rate_hz, "gpu layer: samples per second per GPU")
      ->capture_default_str()
      ->check(bounded(kMinGpuRateHz, kMaxGpuRateHz, "samples per second"));
  serve->add_option("--torch-ops", args->options.torch_ops, kTorchOpsHelp)
      ->capture_default_str()
      ->check(torch_ops_filter());
  serve
      ->add_option("--overhead-budget", args->options.overhead_budget_pct,
                   "keep what tracing costs each traced process under this share of its time "
                   "(1% or 1): launches, copies, syncs and torch operators are then traced part "
                   "of the time (eacgm_traced_ratio says how much)")
      ->transform(overhead_budget_percent());
  serve->add_option("--btf", args->options.btf_path,
                    "kernel BTF file (default: the running kernel's)");
  serve->add_flag("-v,--verbose", args->options.verbose,
                  "show libbpf's diagnostics and each process as it is traced");
  serve->callback([args, &run, parse_layers] {
    run = [args, parse_layers] {
      std::string error;
      auto layers = parse_layers(args->layers, error);
      if (!layers) return fail(kExitUsage, error);
      // Per-function figures have no bounded set of Prometheus labels, and per-thread
      // sampling of every Python process on a node is a profiler's job: record or attach.
      if (layers->contains(Layer::kPython)) {
        return fail(
            kExitUsage,
            "the python layer is for `eacgm record` and `eacgm attach` (per-function figures "
            "have no bounded set of metric labels); serve traces cuda, nccl, torch, os, gpu");
      }
      args->options.layers = *layers;
      return run_serve(args->options);
    };
  });
}

}  // namespace eacgm
